#!/usr/bin/env python3
"""regress_power.py on synthetic runs of a known change: the pooled move of each cell, the
groups it falls in, the calls tallied in the change's direction, and A/A false calls.
Exit 0 when every check holds, 1 with the failures listed."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANT = "ed267614e648"
MAIN = "a3f88e74106c"
OTHER = "931f4fc28c49"


def cell(problem, config, base_us, ratio, verdict):
    blocks = lambda us: [{"n": 20, "us": us}, {"n": 20, "us": us * 1.001}, {"n": 20, "us": us * 0.999}]
    return {"problem": problem, "config": config, "role": "best",
            "baseline": {"blocks": blocks(base_us)}, "candidate": {"blocks": blocks(base_us * ratio)},
            "verdict": {"ratio": ratio, "verdict": verdict}}


def run(base, cand, cells):
    return {"baseline": {"commit": base}, "candidate": {"commit": cand}, "cells": cells}


def main():
    # The variant makes a long cell 1 % slower, a launch-bound cell 2.5 % slower, a power-capped
    # cell 4 % slower and leaves one cell alone. "known" runs have the variant as the baseline.
    long_c = ("prefill/b1/hq16/hkv16/q1024/k1024/d64/causal0/fp16", "fused/a")
    launch = ("prefill/b1/hq4/hkv4/q128/k128/d64/causal0/fp32", "fused/b")
    capped = ("prefill/b4/hq16/hkv16/q4096/k4096/d128/causal0/bf16", "fused/c")
    still = ("decode/b4/hq8/hkv2/q1/k512/d64/causal1/fp32", "fused/d")
    runs = {
        "known1.json": run(VARIANT, MAIN, [cell(*long_c, 100.0, 1 / 1.01, "improved"),
                                           cell(*launch, 12.0, 1 / 1.025, "same"),
                                           cell(*capped, 800.0, 1 / 1.04, "improved"),
                                           cell(*still, 60.0, 1.0, "same")]),
        "swap1.json": run(OTHER, VARIANT, [cell(*long_c, 100.0, 1.01, "regressed"),
                                           cell(*launch, 12.0, 1.025, "regressed"),
                                           cell(*capped, 800.0, 1.04, "unknown"),
                                           cell(*still, 60.0, 1.0, "improved")]),
        "aa1.json": run(OTHER, MAIN, [cell(*long_c, 100.0, 1.0, "same"), cell(*still, 60.0, 1.0, "regressed")]),
        "cal1.json": run(MAIN, MAIN, [cell(*long_c, 100.0, 1.0, "same"), cell(*still, 60.0, 1.0, "unknown")]),
    }
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, body in runs.items():
            paths.append(os.path.join(tmp, name))
            with open(paths[-1], "w") as f:
                json.dump(body, f)
        out = subprocess.run([sys.executable, os.path.join(HERE, "regress_power.py"), "--variant", VARIANT[:7]] + paths,
                             capture_output=True, text=True)
        if out.returncode != 0:
            failures.append(f"exit {out.returncode}: {out.stderr}")
        text = out.stdout
        expect = [
            "1 runs with it as the baseline, 1 as the candidate",
            "| launch-bound | 1.8 % | 2 | 1 (50 %) | 0 | 1 | 0 |",
            "| at least 40 µs | 0.9 % | 2 | 2 (100 %) | 0 | 0 | 0 |",
            "| power-capped | 2.7 % | 2 | 1 (50 %) | 0 | 0 | 1 |",
            "+4.00 %",
            "## A/A: 2 runs, 4 verdicts, 1 false calls, 1 unknown",
            f"- {still[0]} {still[1]}: 1 of 2 runs",
        ]
        for line in expect:
            if line not in text:
                failures.append(f"missing: {line}")
        # The untouched cell moved by nothing: it is in no group's table.
        if f"| {still[0]} {still[1]} | long" in text:
            failures.append("the unmoved cell was counted")
    if failures:
        print("\n".join(failures))
        print(text)
        return 1
    print("regress_power_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
