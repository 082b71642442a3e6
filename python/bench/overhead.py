"""What the Python layer costs: a ConfigCache hit, and fusetune.attention against the same launch
made by calling the C ABI (fusetune_run_on_stream, through ctypes) with everything prepared.

    PYTHONPATH=build/python python3 python/bench/overhead.py [--device cpu|cuda] [--rounds 15]

Both calls launch the same config on the same tensors (out given, so neither allocates); they
alternate in rounds of --calls calls each, and a round's time per call is its wall time over
its calls (CUDA: launches are queued without waiting, then one synchronization per round: the
host's cost per call while the GPU keeps up with it; the shape is small for that). Prints the
median over rounds of each, and of their per-round difference (what attention adds). Targets:
lookup <= 2 us from memory, <= 5 us added per call.
"""

import argparse
import ctypes
import statistics
import sys
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
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

    # The ConfigCache hit, alone.
    lookups = []
    for _ in range(args.rounds):
        lookups.append(timed(lambda: cache.lookup(problem, handle.device_class), args.calls * 10, lambda: None))

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
        timed(fn, 50, sync)
    rows = {"direct": [], "attention": [], "attention_new_out": []}
    for _ in range(args.rounds):
        rows["direct"].append(timed(direct, args.calls, sync))
        rows["attention"].append(timed(through_attention, args.calls, sync))
        rows["attention_new_out"].append(timed(through_attention_allocating, args.calls, sync))
    added = [a - d for a, d in zip(rows["attention"], rows["direct"])]
    added_new_out = [a - d for a, d in zip(rows["attention_new_out"], rows["direct"])]

    med = statistics.median
    print(f"device {handle.device_class}, shape {args.shape} {dtype}, config {config.key()}, "
          f"{args.rounds} rounds of {args.calls} calls, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"lookup (ConfigCache hit)          {med(lookups):8.3f} us   target <= 2 us: "
          f"{'met' if med(lookups) <= 2 else 'missed'}")
    print(f"direct C ABI call (ctypes)        {med(rows['direct']):8.3f} us per call")
    print(f"fusetune.attention (out given)    {med(rows['attention']):8.3f} us per call")
    print(f"fusetune.attention (new out)      {med(rows['attention_new_out']):8.3f} us per call")
    print(f"added by attention (out given)    {med(added):8.3f} us  (rounds: min {min(added):.3f}, max {max(added):.3f})"
          f"   target <= 5 us: {'met' if med(added) <= 5 else 'missed'}")
    print(f"added by attention (new out)      {med(added_new_out):8.3f} us")


if __name__ == "__main__":
    main()
