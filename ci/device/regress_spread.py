#!/usr/bin/env python3
"""How widely the per-round ratios of `fusetune regress --json` runs spread, by round order and
by what ran just before each block.

For each cell of each run (interleaved comparisons only) the per-round log ratios
log(candidate / baseline) of its paired blocks; a cell's spread is the median of their absolute
deviations from their median (in %). Per round order (the run's "round_order", "shuffled" when
absent), the median spread over (cell, run), the median 90 % interval width of the verdicts
(upper / lower - 1), and the verdict counts. Spreads of a suite's cells can differ tenfold (a
two-thread CPU cell against a one-thread one), so the orders are also compared cell by cell:
per cell the median spread over each order's runs, their ratio, and over the cells the
geometric mean of the ratios and how many cells spread less in each order. Where the runs recorded each block's place
("sequence"), each (cell, round) is also classed by what preceded its two blocks: "adjacent"
(the two blocks back to back), "same" (both preceded by blocks of one and the same cell) or
"different", with the median absolute deviation per class.

Usage: regress_spread.py RUN.json... [--cells REGEX] [--min-us US] [--max-us US]
  --cells   only cells whose "problem config" matches REGEX (re.search)
  --min-us / --max-us   only cells whose baseline median block is in that range (µs)
Runs on any machine with python3 (no third-party modules).
"""
import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict


def cell_rounds(cell):
    """(log ratio, baseline place, candidate place) per paired round; places may be None."""
    base = cell["baseline"]
    cand = cell["candidate"]
    n = min(len(base["blocks"]), len(cand["blocks"]))
    seq_b = base.get("sequence") or [None] * n
    seq_c = cand.get("sequence") or [None] * n
    out = []
    for r in range(n):
        b = base["blocks"][r]["us"]
        c = cand["blocks"][r]["us"]
        if b > 0 and c > 0:
            out.append((math.log(c / b), seq_b[r], seq_c[r]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--cells", default="")
    ap.add_argument("--min-us", type=float, default=0.0)
    ap.add_argument("--max-us", type=float, default=float("inf"))
    args = ap.parse_args()
    pattern = re.compile(args.cells) if args.cells else None

    spread = defaultdict(list)    # order -> spreads of (cell, run)
    per_cell = defaultdict(lambda: defaultdict(list))  # cell -> order -> spreads
    widths = defaultdict(list)    # order -> interval widths
    verdicts = defaultdict(lambda: defaultdict(int))
    by_class = defaultdict(lambda: defaultdict(list))  # order -> class -> |dev|
    runs = defaultdict(int)
    for path in args.runs:
        with open(path) as f:
            doc = json.load(f)
        if not doc.get("interleaved", False):
            print(f"{path}: not interleaved, left out", file=sys.stderr)
            continue
        order = doc.get("round_order", "shuffled")
        runs[order] += 1
        cells = doc["cells"]
        # Which cell each place of the measurement belongs to.
        owner = {}
        for i, cell in enumerate(cells):
            for side in ("baseline", "candidate"):
                for place in cell[side].get("sequence") or []:
                    owner[place] = i
        for i, cell in enumerate(cells):
            name = f'{cell["problem"]} {cell["config"]}'
            if pattern and not pattern.search(name):
                continue
            rounds = cell_rounds(cell)
            if len(rounds) < 3:
                continue
            base_us = statistics.median(b["us"] for b in cell["baseline"]["blocks"])
            if not (args.min_us <= base_us <= args.max_us):
                continue
            logs = [r[0] for r in rounds]
            centre = statistics.median(logs)
            devs = [abs(x - centre) for x in logs]
            spread[order].append(100 * statistics.median(devs))
            per_cell[name][order].append(100 * statistics.median(devs))
            v = cell["verdict"]
            if v.get("lower") and v.get("upper"):
                widths[order].append(100 * (v["upper"] / v["lower"] - 1))
            verdicts[order][v["verdict"]] += 1
            for (lr, pb, pc), dev in zip(rounds, devs):
                if pb is None or pc is None:
                    continue
                if abs(pb - pc) == 1:
                    cls = "adjacent"
                elif pb > 0 and pc > 0 and owner.get(pb - 1) is not None and owner.get(pb - 1) == owner.get(pc - 1):
                    cls = "same"
                else:
                    cls = "different"
                by_class[order][cls].append(100 * dev)

    print("| round order | runs | (cell, run) | median spread (%) | median 90 % interval (%) | verdicts |")
    print("|---|---:|---:|---:|---:|---|")
    for order in sorted(spread):
        v = ", ".join(f"{k} {n}" for k, n in sorted(verdicts[order].items()))
        w = f"{statistics.median(widths[order]):.3f}" if widths[order] else "-"
        print(f"| {order} | {runs[order]} | {len(spread[order])} | {statistics.median(spread[order]):.3f} | {w} | {v} |")
    orders = sorted(spread)
    if len(orders) == 2:
        a, b = orders
        ratios = []
        print()
        print(f"| cell | {a} (%) | {b} (%) | {a} / {b} |")
        print("|---|---:|---:|---:|")
        for name in sorted(per_cell):
            sa, sb = per_cell[name].get(a), per_cell[name].get(b)
            if not sa or not sb:
                continue
            ma, mb = statistics.median(sa), statistics.median(sb)
            if ma > 0 and mb > 0:
                ratios.append(ma / mb)
                print(f"| {name} | {ma:.3f} | {mb:.3f} | {ma / mb:.2f} |")
        if ratios:
            geo = math.exp(statistics.mean(math.log(r) for r in ratios))
            print()
            print(f"{a} / {b} spread per cell: geometric mean {geo:.2f} over {len(ratios)} cells; "
                  f"{sum(r < 1 for r in ratios)} spread less {a}, {sum(r > 1 for r in ratios)} less {b}")
    if any(by_class.values()):
        print()
        print("| round order | preceded by | rounds | median abs. deviation (%) |")
        print("|---|---|---:|---:|")
        for order in sorted(by_class):
            for cls in ("adjacent", "same", "different"):
                d = by_class[order].get(cls, [])
                if d:
                    print(f"| {order} | {cls} | {len(d)} | {statistics.median(d):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
