#!/usr/bin/env python3
"""Per swept shape and precision: best and worst verified config, their ratio, and the best
fused config's speedup over the best materialized (and partial) one of the same precision,
from a fusetune SQLite database (trials table).

Usage: sweep_summary.py fusetune.db  -> a markdown table on stdout."""
import sqlite3
import sys


def main():
    db = sqlite3.connect(sys.argv[1])
    rows = db.execute("SELECT problem_key, config_key, median_us, flops FROM trials "
                      "WHERE outcome = 'ok' AND median_us > 0").fetchall()
    counts = dict(db.execute("SELECT problem_key, COUNT(*) FROM trials GROUP BY problem_key").fetchall())
    by_problem = {}
    for problem, config, us, flops in rows:
        precision = config.split("/")[4] if config.count("/") >= 4 else "?"
        by_problem.setdefault(f"{problem} [{precision}]", []).append((us, config, flops or 0.0))
    print("| problem [precision] | trials (ok this precision/all) | best config | best µs | TFLOP/s | worst config | worst µs | worst/best "
          "| fused worst/best | best materialized µs | fused vs materialized | fused vs partial |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for problem in sorted(by_problem):
        trials = sorted(by_problem[problem])
        best, worst = trials[0], trials[-1]

        def variant(name):
            return [t for t in trials if t[1].startswith(name + "/")]
        fused, mat, part = variant("fused"), variant("materialized"), variant("partial")
        fused_spread = f"{fused[-1][0] / fused[0][0]:.2f}x" if fused else ""
        vs_mat = f"{mat[0][0] / fused[0][0]:.2f}x" if fused and mat else ""
        vs_part = f"{part[0][0] / fused[0][0]:.2f}x" if fused and part else ""
        tflops = best[2] / (best[0] * 1e-6) / 1e12 if best[2] else 0.0
        print(f"| {problem} | {len(trials)}/{counts.get(problem.split(' [')[0], 0)} | {best[1]} | {best[0]:.1f} | {tflops:.1f} "
              f"| {worst[1]} | {worst[0]:.1f} | {worst[0] / best[0]:.1f}x | {fused_spread} "
              f"| {mat[0][0] if mat else float('nan'):.1f} | {vs_mat} | {vs_part} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
