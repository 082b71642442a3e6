#!/usr/bin/env python3
"""Markdown table for docs/perf.md from fusetune_cpu_bench's JSON output.

  fusetune_cpu_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      --benchmark_out=cpu_bench.json --benchmark_out_format=json
  python3 kernels/bench/bench_table.py cpu_bench.json

Uses the median aggregate of each benchmark (real time); speedups are time ratios.
"""
import json
import re
import sys


def main(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}  # (S, threads label) -> variant -> (us, gflops, cpu_us)
    extra = []
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        m = re.match(r"BM_Attention/(\w+)/S:(\d+)/threads:(\d+)/", b["name"])
        if not m:
            m2 = re.match(r"BM_Attention/(\w+)/(\d+)/", b["name"])
            if m2:
                extra.append((m2.group(1), int(m2.group(2)), b["real_time"], b["GFLOP/s"], b["label"]))
            continue
        variant, s, threads = m.group(1), int(m.group(2)), int(m.group(3))
        rows.setdefault((s, threads), {})[variant] = (b["real_time"], b["GFLOP/s"], b["cpu_time"], b["label"])
    print("| S | workers | fused µs | partial µs | materialized µs | fused GFLOP/s | partial GFLOP/s "
          "| materialized GFLOP/s | fused vs materialized | fused vs partial |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (s, threads), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if not all(k in v for k in ("fused", "partial", "materialized")):
            continue
        workers = re.search(r"/t(\d+)/", v["fused"][3]).group(1)
        f, p, mat = v["fused"], v["partial"], v["materialized"]
        print(f"| {s} | {workers} | {f[0]:.0f} | {p[0]:.0f} | {mat[0]:.0f} | {f[1]:.1f} | {p[1]:.1f} "
              f"| {mat[1]:.1f} | {mat[0] / f[0]:.2f}x | {p[0] / f[0]:.2f}x |")
    if extra:
        print()
        print("| benchmark | S | config | median µs | GFLOP/s |")
        print("|---|---|---|---|---|")
        for name, s, us, gf, label in extra:
            print(f"| {name} | {s} | {label} | {us:.0f} | {gf:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
