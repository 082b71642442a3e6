#!/usr/bin/env python3
"""Launches torch's SDPA decode (one backend, one decode shape of compare_decode.py) a few times
inside an NVTX range named "measure", so a profiler sees only those launches:

  ncu --nvtx --nvtx-include "measure/" --section LaunchStats --section Occupancy \\
      --section SpeedOfLight python3 ci/device/profile_sdpa_decode.py --shape b16-c8k --backend cudnn

It tells what grid, block size, registers and shared memory the vendor kernels use for the
shapes ours is compared on (the comparison itself is compare_decode.py's). Layouts as there:
query (b, hq, new, d) against a contiguous (b, hkv, cache, d), enable_gqa, bf16, d128.
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = {  # batch, cache, new tokens (hq 32, hkv 8, d 128, bf16)
    "b16-c1k": (16, 1024, 1), "b16-c8k": (16, 8192, 1), "b16-c32k": (16, 32768, 1),
    "b1-c64k": (1, 65536, 1), "b1-c128k": (1, 131072, 1), "b64-c4k-n1": (64, 4096, 1),
}
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="b16-c8k", choices=sorted(SHAPES))
    ap.add_argument("--backend", default="cudnn", choices=sorted(BACKENDS))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--launches", type=int, default=2, help="launches inside the NVTX range")
    args = ap.parse_args()
    batch, cache, new = SHAPES[args.shape]
    hq, hkv, d = 32, 8, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(batch, hq, new, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(batch, hkv, cache, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(batch, hkv, cache, d, device="cuda", dtype=torch.bfloat16, generator=g)
    with torch.no_grad(), sdpa_kernel(BACKENDS[args.backend]):
        for _ in range(args.warmup):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measure")
        for _ in range(args.launches):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print(f"{args.backend} {args.shape}: {args.warmup} + {args.launches} launches")


if __name__ == "__main__":
    main()
