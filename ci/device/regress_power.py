#!/usr/bin/env python3
"""How often `fusetune regress` finds a change of known sign, and how often it calls one where
there is none, from the `--json` runs of one nightly series.

A known change (ci/known-change.sh, its commit given by --variant) is run both ways: with the
variant as the baseline and as the candidate; a run with the variant on neither side is an A/A
run (a calibration, or two builds of the same kernels). Each cell's true move is taken from all of those runs together: the geometric
mean over runs of (variant / unchanged), i.e. 1 / ratio where the variant is the baseline and the
ratio where it is the candidate. Pooling every run's blocks makes it a measurement several times longer than any one
night's; a side-by-side measurement of the two builds (compare_torch.py --also) should agree.

Cells are grouped as the regression targets are stated: launch-bound (the baseline's median
block at most --launch-us), the rest at least --min-us, and the power-capped cells (--capped, a
regex over "problem config"; they belong to that group alone). Per group, the (cell, run) pairs
whose pooled move is at least the group's size (--size-launch, --size, --size-capped) and how
many of them each run called in the change's direction, the other way, same or unknown. The A/A
runs count the calls that are not "same" or "unknown" (false alarms) per cell.

Usage: regress_power.py --variant COMMIT RUN.json... [--capped REGEX] [--launch-us 25] [--min-us 40]
                        [--size 0.009] [--size-launch 0.018] [--size-capped 0.027]
Markdown on stdout. Runs on any machine with python3 (no third-party modules).
"""
import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        return json.load(f)


def cell_name(cell):
    return f'{cell["problem"]} {cell["config"]}'


def median_us(side):
    return statistics.median(b["us"] for b in side["blocks"]) if side.get("blocks") else math.nan


def group_of(cell, base_us, args):
    if args.capped and re.search(args.capped, cell_name(cell)):
        return "capped"
    if base_us <= args.launch_us:
        return "launch"
    if base_us >= args.min_us:
        return "long"
    return None


SIZES = {"launch": "size_launch", "long": "size", "capped": "size_capped"}
TITLES = {"launch": "launch-bound", "long": "at least {min_us:g} µs", "capped": "power-capped"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="RUN.json")
    p.add_argument("--variant", required=True, help="the known change's commit (a prefix will do)")
    p.add_argument("--capped", default=r"q4096/k4096/d128/causal\d/bf16")
    p.add_argument("--launch-us", type=float, default=25.0)
    p.add_argument("--min-us", type=float, default=40.0)
    p.add_argument("--size", type=float, default=0.009)
    p.add_argument("--size-launch", type=float, default=0.018)
    p.add_argument("--size-capped", type=float, default=0.027)
    args = p.parse_args()

    runs = []
    aa = []
    for path in args.runs:
        run = load(path)
        base = run.get("baseline", {}).get("commit", "")
        cand = run.get("candidate", {}).get("commit", "")
        variant = args.variant.lower()
        if base and variant.startswith(base[:len(variant)]) and base.startswith(variant[:len(base)]):
            runs.append(("known", path, run))
        elif cand and variant.startswith(cand[:len(variant)]) and cand.startswith(variant[:len(cand)]):
            runs.append(("swap", path, run))
        else:
            aa.append((path, run))
    known = sum(1 for r in runs if r[0] == "known")
    # log(variant / unchanged) per cell and run, and each run's verdict in the change's terms.
    logs = defaultdict(list)
    calls = defaultdict(dict)
    base_us = {}
    cells = {}
    for kind, path, run in runs:
        for cell in run.get("cells", []):
            v = cell.get("verdict", {})
            name = cell_name(cell)
            cells[name] = cell
            base_us.setdefault(name, median_us(cell["baseline"]))
            r = v.get("ratio")
            if r and r > 0:
                logs[name].append(-math.log(r) if kind == "known" else math.log(r))
            verdict = v.get("verdict", "missing")
            # In the change's terms: "slower" means the run saw the variant slower.
            slower = {"known": {"improved": "slower", "regressed": "faster"},
                      "swap": {"regressed": "slower", "improved": "faster"}}[kind]
            calls[name][path] = slower.get(verdict, verdict)

    if runs:
        print(f"## A known change: {known} runs with it as the baseline, {len(runs) - known} as the candidate\n")
        print("| group | size | (cell, run) pairs | in the change's direction | the other way | same | unknown |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        rows = []
        for group in ("launch", "long", "capped"):
            size = getattr(args, SIZES[group])
            tally = defaultdict(int)
            for name, ls in logs.items():
                if group_of(cells[name], base_us[name], args) != group or not ls:
                    continue
                move = math.exp(sum(ls) / len(ls)) - 1
                if abs(move) < size:
                    continue
                want = "slower" if move > 0 else "faster"
                for path, call in calls[name].items():
                    tally["pairs"] += 1
                    if call == want:
                        tally["right"] += 1
                    elif call in ("slower", "faster"):
                        tally["wrong"] += 1
                    else:
                        tally[call] += 1
                rows.append((group, name, base_us[name], move, calls[name]))
            title = TITLES[group].format(min_us=args.min_us)
            n = tally["pairs"]
            right = f'{tally["right"]} ({100 * tally["right"] / n:.0f} %)' if n else "0"
            print(f'| {title} | {100 * size:.1f} % | {n} | {right} | {tally["wrong"]} | {tally["same"]} | '
                  f'{tally["unknown"]} |')
        print("\n| cell | group | baseline µs | pooled move | calls |")
        print("|---|---|---:|---:|---|")
        for group, name, us, move, by_run in sorted(rows, key=lambda r: (r[0], r[1])):
            print(f"| {name} | {group} | {us:.1f} | {100 * move:+.2f} % | {', '.join(by_run.values())} |")

    if aa:
        false = defaultdict(int)
        verdicts = 0
        unknown = 0
        for path, run in aa:
            for cell in run.get("cells", []):
                verdict = cell.get("verdict", {}).get("verdict", "missing")
                verdicts += 1
                if verdict in ("regressed", "improved"):
                    false[cell_name(cell)] += 1
                elif verdict != "same":
                    unknown += 1
        print(f"\n## A/A: {len(aa)} runs, {verdicts} verdicts, {sum(false.values())} false calls, "
              f"{unknown} unknown\n")
        for name, n in sorted(false.items()):
            print(f"- {name}: {n} of {len(aa)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
