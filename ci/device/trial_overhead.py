#!/usr/bin/env python3
"""Per-trial overhead of the screen trials in fusetune databases (schema 2: wall_seconds).

For each screen trial that verified and was timed: its timed kernel work (the sum of its kept
samples, plus the warm-up launches counted at the median), its wall time, and the overhead
(wall - timed work: verification runs, output downloads and checks, L2 flushes, launches). The
tuner's target is overhead <= 2 x timed work + 20 ms. Prints, per database and variant, the
median and worst overhead and how many trials meet the target, as markdown.

Usage: trial_overhead.py DB [DB ...] [--warmup N]   (N: the sweep's --warmup, default 1)
"""
import argparse
import json
import sqlite3
import statistics
import sys


def rows(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    cols = {r[1] for r in con.execute("PRAGMA table_info(trials)")}
    if "wall_seconds" not in cols:
        raise SystemExit(f"{path}: no wall_seconds column (a schema-1 database)")
    for config, samples, median, wall in con.execute(
            "SELECT config_key, samples_json, median_us, wall_seconds FROM trials "
            "WHERE outcome = 'ok' AND stage = 'screen' AND wall_seconds > 0"):
        yield config.split("/")[0], json.loads(samples), median, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    print("| database | variant | trials | median timed ms | median overhead ms | worst overhead ms | "
          "meet overhead <= 2x timed + 20 ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for db in a.dbs:
        per = {}
        for variant, samples, median, wall in rows(db):
            timed = (sum(samples) + a.warmup * median) * 1e-6
            overhead = wall - timed
            per.setdefault(variant, []).append((timed, overhead, overhead <= 2 * timed + 0.020))
        for variant, xs in sorted(per.items()):
            print(f"| {db.split('/')[-1]} | {variant} | {len(xs)} | "
                  f"{1e3 * statistics.median(t for t, _, _ in xs):.2f} | "
                  f"{1e3 * statistics.median(o for _, o, _ in xs):.2f} | {1e3 * max(o for _, o, _ in xs):.2f} | "
                  f"{sum(ok for _, _, ok in xs)}/{len(xs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
