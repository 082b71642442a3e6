#!/usr/bin/env python3
"""Where a persistent Hopper prefill launch spends its time, per block (GPU host).

A build of the Hopper kernels with kernels/cuda/dev/probes/timeline.patch applied
(kernels/cuda/dev/build_hopper_dev.sh OUT timeline=kernels/cuda/dev/probes/timeline.patch)
stamps the global timer (ns) in every block: its start, its barriers set up, its producer warp
ready to load, its consumers' registers raised, its first Q in shared memory, the end of each tile's
epilogue and its exit, with its multiprocessor and tile count. This script runs such
a library on a shape as compare_torch.py's fusetune_time does (L2 flushed by a 256 MiB read
before the launch), reads the stamps after each launch and reports, as medians over launches:

  span            last block exit - first block start (the kernel as the blocks see it)
  start spread    latest block start - first block start
  setup, producer, registers
                  block start to: its barriers set up (after __syncthreads), its producer warp
                  ready to load (setmaxnreg.dec done), its consumers' setmaxnreg.inc done
  first Q         first Q in shared memory - block start (the cold loads, block setup)
  tile 0 / tiles  the first tile's time (from the block start) / the median later tile
  exit            block exit - its last tile's end
  idle start/end  mean over blocks of (its start - the first start) and (the last exit - its
                  exit), in % of the span: the multiprocessor time a launch leaves unused, at
                  the start and at the end (the partial last round is in "idle end")
  tail idle       the share of "idle end" a perfectly even last round would leave: blocks with
                  fewer tiles idle for one median tile

It checks the probe build's output against the float64 reference first, and times the probe
build beside the unpatched one (--base, optional) so the stamps' cost is known.

  python3 ci/device/timeline_probe.py --lib BUNDLE/lib/libfusetune_capi.so \
      --probe OUT/timeline/libfusetune_hopper_dev.so [--base OUT/base/libfusetune_hopper_dev.so] \
      --shapes fp16-d128-s1024-b8,bf16-d128-s4096 --config 'fused/bm128/bs128/t384/{p}/st2/persistent'

--self-test checks the analysis on synthetic stamps (no GPU, no torch).
"""
import argparse
import csv
import ctypes
import os
import statistics
import sys

TIMELINE_BLOCKS, TIMELINE_SLOTS, TIMELINE_TILES = 1024, 40, 32  # as timeline.patch
SLOT_START, SLOT_FIRST_Q, SLOT_TILES, SLOT_SM, SLOT_EXIT, SLOT_TILE0 = 0, 1, 2, 3, 4, 5
SLOT_SETUP, SLOT_PRODUCER, SLOT_REGS = 37, 38, 39


def blocks_of(stamps):
    """The launched blocks' rows of a flat stamp array (a block that ran has a start stamp)."""
    rows = []
    for b in range(TIMELINE_BLOCKS):
        r = stamps[b * TIMELINE_SLOTS:(b + 1) * TIMELINE_SLOTS]
        if r[SLOT_START] == 0:
            continue
        tiles = int(r[SLOT_TILES])
        rows.append({"block": b, "start": r[SLOT_START], "first_q": r[SLOT_FIRST_Q], "tiles": tiles,
                     "sm": int(r[SLOT_SM]), "exit": r[SLOT_EXIT], "setup": r[SLOT_SETUP],
                     "producer": r[SLOT_PRODUCER], "regs": r[SLOT_REGS],
                     "tile_ends": [r[SLOT_TILE0 + k] for k in range(min(tiles, TIMELINE_TILES))]})
    return rows


def analyse(rows):
    """One launch's figures (ns and %) from blocks_of's rows; None without blocks."""
    if not rows:
        return None
    t0 = min(r["start"] for r in rows)
    t_end = max(r["exit"] for r in rows)
    span = t_end - t0
    first_tiles, later_tiles, exits = [], [], []
    marks = {"setup": [], "producer": [], "regs": [], "first_q": []}  # stamps after the start (0: none)
    for r in rows:
        for key, values in marks.items():
            if r[key]:
                values.append(r[key] - r["start"])
        prev = r["start"]
        for k, end in enumerate(r["tile_ends"]):
            (first_tiles if k == 0 else later_tiles).append(end - prev)
            prev = end
        if r["tile_ends"]:
            exits.append(r["exit"] - r["tile_ends"][-1])
    n = len(rows)
    idle_start = sum(r["start"] - t0 for r in rows) / n
    idle_end = sum(t_end - r["exit"] for r in rows) / n
    most = max(r["tiles"] for r in rows)
    tile = statistics.median(later_tiles) if later_tiles else (statistics.median(first_tiles) if first_tiles else 0)
    tail = sum((most - r["tiles"]) * tile for r in rows) / n
    pct = (lambda x: 100.0 * x / span) if span > 0 else (lambda x: 0.0)
    return {
        "blocks": n, "most_tiles": most, "fewer_tiles_blocks": sum(1 for r in rows if r["tiles"] < most),
        "span_us": span / 1e3, "start_spread_us": (max(r["start"] for r in rows) - t0) / 1e3,
        **{key + "_us": statistics.median(v) / 1e3 if v else float("nan") for key, v in marks.items()},
        "tile0_us": statistics.median(first_tiles) / 1e3 if first_tiles else float("nan"),
        "tile_us": tile / 1e3,
        "exit_us": statistics.median(exits) / 1e3 if exits else float("nan"),
        "idle_start_pct": pct(idle_start), "idle_end_pct": pct(idle_end), "tail_idle_pct": pct(tail),
        "exit_spread_us": (t_end - min(r["exit"] for r in rows)) / 1e3,
    }


FIELDS = ["span_us", "start_spread_us", "setup_us", "producer_us", "regs_us", "first_q_us", "tile0_us", "tile_us", "exit_us", "idle_start_pct",
          "idle_end_pct", "tail_idle_pct", "exit_spread_us"]


def median_of(launches):
    """Per field, the median over launches' analyse() results."""
    out = {k: statistics.median(a[k] for a in launches) for k in FIELDS}
    out.update({k: launches[0][k] for k in ("blocks", "most_tiles", "fewer_tiles_blocks")})
    return out


def report(rows_by_shape):
    lines = ["| shape | blocks (fewer tiles) | tiles | timer µs | span µs | start spread µs | setup µs | "
             "producer µs | registers µs | first Q µs | tile 0 µs | tile µs | exit µs | idle start % | idle end % | "
             "tail idle % | exit spread µs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, (m, timer_us) in rows_by_shape.items():
        lines.append(f"| {shape} | {m['blocks']} ({m['fewer_tiles_blocks']}) | {m['most_tiles']} | {timer_us:.1f} | "
                     f"{m['span_us']:.1f} | {m['start_spread_us']:.2f} | {m['setup_us']:.2f} | {m['producer_us']:.2f} | "
                     f"{m['regs_us']:.2f} | {m['first_q_us']:.2f} | {m['tile0_us']:.2f} | "
                     f"{m['tile_us']:.2f} | {m['exit_us']:.2f} | {m['idle_start_pct']:.2f} | {m['idle_end_pct']:.2f} | "
                     f"{m['tail_idle_pct']:.2f} | {m['exit_spread_us']:.2f} |")
    return "\n".join(lines)


def synthetic(blocks, tiles_total, tile_ns, start_step_ns, q_ns, exit_ns):
    """Stamps of an ideal persistent launch: block b starts at b * start_step_ns and computes
    tiles round-robin, each tile_ns long (the first q_ns longer)."""
    stamps = [0] * (TIMELINE_BLOCKS * TIMELINE_SLOTS)
    for b in range(blocks):
        tiles = len(range(b, tiles_total, blocks))
        base = b * TIMELINE_SLOTS
        start = 1_000_000 + b * start_step_ns
        stamps[base + SLOT_START] = start
        stamps[base + SLOT_FIRST_Q] = start + q_ns
        stamps[base + SLOT_SETUP] = start + q_ns // 8
        stamps[base + SLOT_PRODUCER] = start + q_ns // 4
        stamps[base + SLOT_REGS] = start + q_ns // 2
        stamps[base + SLOT_TILES] = tiles
        stamps[base + SLOT_SM] = b
        t = start + q_ns
        for k in range(tiles):
            t += tile_ns
            stamps[base + SLOT_TILE0 + k] = t
        stamps[base + SLOT_EXIT] = t + exit_ns
    return stamps


def self_test():
    # 132 blocks, 1024 tiles: 100 blocks compute 8, 32 compute 7; tiles of 15 µs.
    a = analyse(blocks_of(synthetic(132, 1024, 15_000, 0, 2_000, 500)))
    assert a["blocks"] == 132 and a["most_tiles"] == 8 and a["fewer_tiles_blocks"] == 32, a
    assert abs(a["span_us"] - (2 + 8 * 15 + 0.5)) < 1e-9, a
    assert abs(a["tile0_us"] - 17.0) < 1e-9 and abs(a["tile_us"] - 15.0) < 1e-9, a
    assert abs(a["first_q_us"] - 2.0) < 1e-9 and abs(a["exit_us"] - 0.5) < 1e-9, a
    assert (a["setup_us"], a["producer_us"], a["regs_us"]) == (0.25, 0.5, 1.0), a
    assert a["idle_start_pct"] == 0 and a["start_spread_us"] == 0, a
    # The only idle time is the partial last round: 32 of 132 blocks, one tile each.
    expect = 100.0 * 32 * 15.0 / 132 / a["span_us"]
    assert abs(a["idle_end_pct"] - expect) < 1e-9 and abs(a["tail_idle_pct"] - expect) < 1e-9, a
    # Staggered starts: block b starts b * 100 ns late, so it also exits that much later.
    b = analyse(blocks_of(synthetic(132, 1056, 15_000, 100, 2_000, 500)))
    assert b["fewer_tiles_blocks"] == 0 and abs(b["start_spread_us"] - 13.1) < 1e-9, b
    assert abs(b["idle_start_pct"] - 100.0 * 6.55 / b["span_us"]) < 1e-9, b
    assert abs(b["idle_end_pct"] - b["idle_start_pct"]) < 1e-9 and b["tail_idle_pct"] == 0, b
    assert analyse(blocks_of([0] * (TIMELINE_BLOCKS * TIMELINE_SLOTS))) is None
    m = median_of([a, a, b])
    assert m["span_us"] == a["span_us"] and m["blocks"] == 132, m
    print(report({"synthetic": (m, 123.4)}))
    print("self-test passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="the full libfusetune_capi.so (config keys, tolerances)")
    ap.add_argument("--probe", help="the Hopper dev library built with probes/timeline.patch")
    ap.add_argument("--base", help="the unpatched Hopper dev library, timed beside the probe")
    ap.add_argument("--shapes", default="fp16-d128-s1024-b8,bf16-d128-s4096")
    ap.add_argument("--config", default="fused/bm128/bs128/t384/{p}/st2/persistent", help="config key, {p} = precision")
    ap.add_argument("--launches", type=int, default=7)
    ap.add_argument("--out", default="timeline-probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.lib or not args.probe:
        ap.error("--lib and --probe are needed (or --self-test)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compare_torch as ct  # torch, CUDA
    import torch
    args.spin_us_per_launch = 0.0
    ft, _reader, device_text = ct.start_session(args, ct.Fusetune)
    probe = ct.Fusetune(args.probe)
    base = ct.Fusetune(args.base) if args.base else None
    flush = torch.empty(ct.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    stamps = (ctypes.c_ulonglong * (TIMELINE_BLOCKS * TIMELINE_SLOTS))()
    results = {}
    with open(os.path.join(args.out, "timeline.csv"), "w", newline="") as raw:
        writer = csv.writer(raw)
        writer.writerow(["shape", "launch", "block", "sm", "tiles", "start_ns", "setup_ns", "producer_ns", "regs_ns",
                         "first_q_ns", "exit_ns", "tile_ends_ns"])
        ct.add_spelled_shapes(args.shapes)
        for shape_id in ct.parse_list(args.shapes, ct.SHAPES, "shape"):
            s = ct.SHAPES[shape_id]
            read = getattr(probe.lib, "fusetune_dev_timeline_" + ("bf16" if s.dtype == ct.BF16 else "fp16"))
            read.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
            bench = ct.ShapeBench(s, ft, flush, 0.0)
            bench.ft_of = {"probe": probe, "base": base} if base else {"probe": probe}
            cfg = ft.config(args.config.format(p=s.precision))
            err = bench.verify_ours(cfg, "probe")
            tol = ft.tolerance(s.precision, s.dtype)
            ct.log(f"{shape_id}: probe build's error {err:.2e} (tolerance {tol:.1e})")
            if not err <= tol:
                ct.log(f"{shape_id}: the probe build fails the reference check; no timeline")
                continue
            read(stamps, len(stamps))  # drop the verification launch's stamps
            launches, timer = [], []
            base_us, probe_us = [], []
            for i in range(args.launches):
                if base is not None:
                    base_us.append(statistics.median(bench.ours_block(cfg, 1, 3, "base")))
                    probe_us.append(statistics.median(bench.ours_block(cfg, 1, 3, "probe")))
                timer.append(bench.ours_block(cfg, 1, 1, "probe")[-1])
                if read(stamps, len(stamps)) != 0:
                    raise RuntimeError("fusetune_dev_timeline failed")
                rows = blocks_of(list(stamps))
                for r in rows:
                    writer.writerow([shape_id, i, r["block"], r["sm"], r["tiles"], r["start"], r["setup"], r["producer"],
                                     r["regs"], r["first_q"], r["exit"],
                                     " ".join(str(t) for t in r["tile_ends"])])
                a = analyse(rows)
                if a is not None:
                    launches.append(a)
            if not launches:
                continue
            results[shape_id] = (median_of(launches), statistics.median(timer))
            if base is not None:
                ratio = statistics.median(p / b for p, b in zip(probe_us, base_us))
                ct.log(f"{shape_id}: probe / base build, medians of {len(base_us)} alternated launches: {ratio:.4f} "
                       f"({statistics.median(probe_us):.1f} / {statistics.median(base_us):.1f} µs)")
    text = f"Device: {device_text}\n\n" + report(results)
    with open(os.path.join(args.out, "timeline.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
