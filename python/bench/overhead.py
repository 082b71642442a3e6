"""What the Python layer costs: a ConfigCache hit, and fusetune.attention against the same launch
made by calling the C ABI (fusetune_run_on_stream, through ctypes) with everything prepared.

    PYTHONPATH=build/python python3 python/bench/overhead.py [--device cpu|cuda] [--pairs 20000]

Lookups: a hit (from memory), and a miss answered with the default config or from a snapshot
file (a new problem each time; no server). Both calls launch the same config on the same tensors (out given, so neither allocates; a third
form lets attention allocate out). They are timed call by call in pairs, the two in a random
order each time, so that a machine whose load changes (a shared build box) slows both alike;
what attention adds is the median over the pairs of (attention - direct). CUDA: launches are
queued without waiting (the shape is small, so the GPU keeps up with the host) and the queue is
drained every 200 pairs, outside the timed calls. Targets: lookup <= 2 us from memory, <= 5 us
added per call.
"""

import argparse
import ctypes
import dataclasses
import json
import os
import random
import statistics
import sys
import tempfile
import time

import fusetune
from fusetune import _capi
from fusetune import kernels


def timed(fn, calls, sync):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def paired(first, second, pairs, sync):
    """Per pair the time of each call (us), the two in a random order; sync every 200 pairs."""
    clock = time.perf_counter_ns
    a_times, b_times = [], []
    order = random.Random(1)
    for i in range(pairs):
        if order.random() < 0.5:
            t0 = clock(); first(); t1 = clock(); second(); t2 = clock()
            a_times.append((t1 - t0) / 1000)
            b_times.append((t2 - t1) / 1000)
        else:
            t0 = clock(); second(); t1 = clock(); first(); t2 = clock()
            b_times.append((t1 - t0) / 1000)
            a_times.append((t2 - t1) / 1000)
        if i % 200 == 199:
            sync()
    return a_times, b_times


def miss_costs(device_class, problems=3000, runs=5):
    """A lookup of a problem the cache has never seen, without a server: answered with the
    default config (its key and default through the C ABI), or from a snapshot file holding it.
    Median over `runs` runs of `problems` new problems, us per lookup."""
    shapes = [fusetune.Problem(batch=1, q_heads=2, q_len=8 + i, kv_len=8 + i, head_dim=32) for i in range(problems)]
    with tempfile.TemporaryDirectory() as d:
        snapshot = os.path.join(d, "configs.json")
        entries = [{"device_class": device_class, "problem_key": p.key(), "config_key": "fused/bm16/bs16/t1/fp32/st1",
                    "provenance": "exact", "median_us": 1.0} for p in shapes]
        with open(snapshot, "w") as f:
            json.dump({"format": "fusetune-config-snapshot", "version": 1, "entries": entries}, f)
        out = []
        for path in (None, snapshot):
            costs = []
            for _ in range(runs):
                cache = fusetune.ConfigCache(snapshot=path, max_entries=1 << 30)
                fresh = [dataclasses.replace(p) for p in shapes]  # new objects: nothing cached on them
                start = time.perf_counter()
                for p in fresh:
                    cache.lookup(p, device_class)
                costs.append((time.perf_counter() - start) / problems * 1e6)
            out.append(statistics.median(costs))
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--lookups", type=int, default=200000)
    parser.add_argument("--shape", default="1,16,2,64", help="batch,seqlen,heads,head_dim (small: launch-bound)")
    parser.add_argument("--dtype", default=None, help="float32 (cpu default), bfloat16 (cuda default), float16")
    args = parser.parse_args()

    import torch
    batch, seqlen, heads, head_dim = (int(x) for x in args.shape.split(","))
    dtype = getattr(torch, args.dtype or ("float32" if args.device == "cpu" else "bfloat16"))
    device = torch.device(args.device)
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, dtype=dtype, device=device) for _ in range(3))
    out = torch.empty_like(q)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    # The config the cache answers (the default while nothing is fetched), fixed for both calls.
    device_index = -1 if args.device == "cpu" else q.get_device()
    handle = kernels._handle(device_index)
    problem = fusetune.Problem(batch=batch, q_heads=heads, q_len=seqlen, kv_len=seqlen, head_dim=head_dim,
                               dtype={torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype])
    cache = fusetune.default_config_cache()
    config = cache.lookup(problem, handle.device_class).config

    # The ConfigCache hit, alone (in rounds of 10000; the median round).
    lookups = [timed(lambda: cache.lookup(problem, handle.device_class), 10000, lambda: None)
               for _ in range(max(1, args.lookups // 10000))]
    misses_default, misses_snapshot = miss_costs(handle.device_class)

    # The direct C ABI call: every argument prepared once.
    problem_struct, cache_struct = problem._structs()[:2]
    problem_ptr, cache_ptr = ctypes.pointer(problem_struct), ctypes.pointer(cache_struct)
    config_ptr = ctypes.pointer(config._struct())
    launch = _capi.LaunchStruct()
    if args.device == "cuda":
        launch.stream = torch.cuda.current_stream().cuda_stream
    launch_ptr = ctypes.pointer(launch) if args.device == "cuda" else None
    err = _capi.error_buffer()
    pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr())
    run = _capi.run_on_stream

    def direct():
        rc = run(handle.ptr, problem_ptr, cache_ptr, config_ptr, *pointers, launch_ptr, err, _capi.ERROR_BYTES)
        if rc != 0:
            raise RuntimeError(err.value.decode())

    def through_attention():
        fusetune.attention(q, k, v, out=out)

    def through_attention_allocating():
        fusetune.attention(q, k, v)

    for fn in (direct, through_attention, through_attention_allocating):  # warm up
        timed(fn, 200, sync)
    direct_us, attention_us = paired(direct, through_attention, args.pairs, sync)
    direct_new_us, allocating_us = paired(direct, through_attention_allocating, args.pairs, sync)
    sync()
    added = [a - d for a, d in zip(attention_us, direct_us)]
    added_new_out = [a - d for a, d in zip(allocating_us, direct_new_us)]

    med = statistics.median

    def quartiles(xs):
        q = statistics.quantiles(xs, n=4)
        return f"[{q[0]:.2f}, {q[2]:.2f}]"

    print(f"device {handle.device_class}, shape {args.shape} {dtype}, config {config.key()}, {args.pairs} pairs, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"lookup (ConfigCache hit)          {med(lookups):8.3f} us   target <= 2 us: "
          f"{'met' if med(lookups) <= 2 else 'missed'}")
    print(f"lookup, miss -> default config    {misses_default:8.3f} us   (a new problem, no server)")
    print(f"lookup, miss -> snapshot file     {misses_snapshot:8.3f} us")
    print(f"direct C ABI call (ctypes)        {med(direct_us):8.3f} us per call, quartiles {quartiles(direct_us)}")
    print(f"fusetune.attention (out given)    {med(attention_us):8.3f} us per call, quartiles {quartiles(attention_us)}")
    print(f"fusetune.attention (new out)      {med(allocating_us):8.3f} us per call, quartiles {quartiles(allocating_us)}")
    print(f"added by attention (out given)    {med(added):8.3f} us, quartiles {quartiles(added)}   target <= 5 us: "
          f"{'met' if med(added) <= 5 else 'missed'}")
    print(f"added by attention (new out)      {med(added_new_out):8.3f} us, quartiles {quartiles(added_new_out)}")


if __name__ == "__main__":
    main()
