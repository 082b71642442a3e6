#!/usr/bin/env python3
"""Summary of ci/device/multi_gpu_check.sh: jobs per hour with one GPU against all of them, and
whether the timings of the same cell agree between GPUs.

Usage: multi_gpu_summary.py PHASES_TXT ONE_DB ALL_DB

A cell is (problem_key, config_key) measured with outcome 'ok' by jobs that ran on different
GPUs of the 'all' phase (runs.device_json.device_index tells which). Agreement is judged against
each measurement's own noise: the two medians agree when |m0 - m1| <= max(p90 - p10 of the two
measurements), i.e. the difference is inside the run-to-run spread.
"""
import json
import sqlite3
import statistics
import sys


def jobs(db):
    c = sqlite3.connect(db)
    return c.execute("SELECT job_id, state, run_id, leased_by FROM jobs ORDER BY job_id").fetchall()


def cells_by_device(db):
    c = sqlite3.connect(db)
    out = {}
    q = ("SELECT r.device_json, t.problem_key, t.config_key, t.median_us, t.p10_us, t.p90_us "
         "FROM trials t JOIN runs r ON r.run_id = t.run_id WHERE t.outcome = 'ok'")
    for dev_json, problem, config, med, p10, p90 in c.execute(q):
        dev = json.loads(dev_json).get("device_index", -1)
        out.setdefault(dev, {}).setdefault((problem, config), []).append((med, p10, p90))
    return out


def main():
    phases = {}
    for line in open(sys.argv[1]):
        name, n, wall, rc = line.split()
        phases[name] = (int(n), float(wall), int(rc))
    print("| phase | GPUs | jobs | done | failed | wall s | jobs/hour |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, db in (("one", sys.argv[2]), ("all", sys.argv[3])):
        n, wall, rc = phases[name]
        js = jobs(db)
        devs = cells_by_device(db)
        done = sum(1 for j in js if j[1] == "done")
        failed = sum(1 for j in js if j[1] == "failed")
        print(f"| {name} | {len(devs)} (device_index {sorted(devs)}) | {n} | {done} | {failed} | {wall:.1f} | "
              f"{n * 3600 / wall:.0f} |")
    if "one" in phases and "all" in phases:
        print(f"\nspeed-up of all GPUs over one: {phases['one'][1] / phases['all'][1]:.2f}x in wall time")

    devs = cells_by_device(sys.argv[3])
    if len(devs) < 2:
        print("\nonly one GPU measured in the 'all' phase: no cross-GPU comparison")
        return
    d0, d1 = sorted(devs)[:2]
    common = sorted(set(devs[d0]) & set(devs[d1]))
    ratios, agree = [], 0
    rows = []
    for cell in common:
        a = statistics.median(m for m, _, _ in devs[d0][cell])
        b = statistics.median(m for m, _, _ in devs[d1][cell])
        spread = max(max(p90 - p10 for _, p10, p90 in devs[d0][cell]),
                     max(p90 - p10 for _, p10, p90 in devs[d1][cell]))
        ok = abs(a - b) <= spread
        agree += ok
        ratios.append(b / a)
        rows.append((cell, a, b, spread, ok))
    print(f"\ncells measured on both GPU {d0} and GPU {d1}: {len(common)}; medians within the p10-p90 "
          f"spread: {agree}/{len(common)}")
    if ratios:
        dev = [abs(r - 1) for r in ratios]
        print(f"GPU{d1}/GPU{d0} median ratio: median {statistics.median(ratios):.4f}, "
              f"min {min(ratios):.4f}, max {max(ratios):.4f}; median |ratio - 1| {100 * statistics.median(dev):.2f} %")
        print("\n| problem | config | GPU0 median us | GPU1 median us | p10-p90 spread us | within |")
        print("|---|---|---:|---:|---:|---|")
        for (problem, config), a, b, spread, ok in sorted(rows, key=lambda r: r[1])[:12]:
            print(f"| {problem} | {config} | {a:.1f} | {b:.1f} | {spread:.1f} | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
