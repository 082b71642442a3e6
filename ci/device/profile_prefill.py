#!/usr/bin/env python3
"""Launches one prefill shape of compare_torch.py — ours through libfusetune_capi.so with a
given config, or torch's SDPA with one backend — a few times inside an NVTX range named
"measure", so a profiler sees only those launches:

  ncu --nvtx --nvtx-include "measure/" --section LaunchStats --section Occupancy \\
      --section SpeedOfLight --section ComputeWorkloadAnalysis \\
      python3 ci/device/profile_prefill.py --shape bf16-d128-s4096 --who cudnn
  ncu ... python3 ci/device/profile_prefill.py --shape bf16-d128-s4096 --who ours \\
      --lib lib/libfusetune_capi.so --config fused/bm128/bs128/t384/bf16/st2/pingpong

A kernel variant's library (kernels/cuda/dev/build_hopper_dev.sh) has no key parser: give it as
--run-lib beside the full --lib, which parses --config.

It tells what grid, block, registers, shared memory and unit throughputs each kernel has on the
shapes the comparison times (the timing itself is compare_torch.py's, interleaved). Inputs and
layouts as there: ours [b*s][h][d], torch (b, h, s, d) copies, uniform in [-1, 1), enable_gqa for
GQA shapes.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (the shapes, the C ABI wrapper)

import torch  # noqa: E402

BACKENDS = ["cudnn", "efficient", "flash"]  # torch.nn.attention.SDPBackend members


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bf16-d128-s4096",
                    help="a shape id of compare_torch.py, named (" + ", ".join(sorted(ct.SHAPES)) +
                    ") or spelled out as PRECISION-dD-sS-bB-hH[-kvKV][-causal]")
    ap.add_argument("--who", default="cudnn", choices=["ours"] + BACKENDS)
    ap.add_argument("--lib", help="libfusetune_capi.so (for --who ours)")
    ap.add_argument("--config", help="our config key (for --who ours)")
    ap.add_argument("--run-lib", help="a kernel variant's libfusetune_hopper_dev.so that runs ours instead of --lib "
                    "(--lib still parses --config)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--launches", type=int, default=2, help="launches inside the NVTX range")
    args = ap.parse_args()
    ct.add_spelled_shapes(args.shape)
    if args.shape not in ct.SHAPES:
        raise SystemExit(f"--shape {args.shape}: unknown (choose from {', '.join(sorted(ct.SHAPES))}, or spell one out)")
    if args.who == "ours" and not (args.lib and args.config):
        raise SystemExit("--who ours needs --lib and --config")
    s = ct.SHAPES[args.shape]
    dtype = getattr(torch, ct.TORCH_DTYPE_NAME[s.dtype])
    b, h, hkv, n, d = s.batch, s.heads, s.kv(), s.seq, s.head_dim
    g = torch.Generator(device="cuda").manual_seed(1)
    q = (torch.rand(b, n, h, d, device="cuda", generator=g) * 2 - 1).to(dtype)
    k = (torch.rand(b, n, hkv, d, device="cuda", generator=g) * 2 - 1).to(dtype)
    v = (torch.rand(b, n, hkv, d, device="cuda", generator=g) * 2 - 1).to(dtype)
    if args.who == "ours":
        ft = ct.Fusetune(args.lib)
        problem = ct.Problem(b, h, hkv, n, n, d, 1 if s.causal else 0, s.dtype, 0.0, None, None, None)
        config = ft.config(args.config)
        runner = ct.Fusetune(args.run_lib) if args.run_lib else ft
        o = torch.empty_like(q)

        def call():
            runner.run(problem, config, q, k, v, o)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # torch 2.3+
        backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION}[args.who]
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        gqa = {"enable_gqa": True} if hkv != h else {}

        def call():
            with torch.no_grad(), sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=s.causal,
                                                                 scale=1.0 / math.sqrt(d), **gqa)
    for _ in range(args.warmup):
        call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    for _ in range(args.launches):
        call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print(f"{args.who} {args.shape}{' ' + args.config if args.config else ''}"
          f"{' on ' + args.run_lib if args.run_lib else ''}: {args.warmup} + {args.launches} launches")


if __name__ == "__main__":
    main()
