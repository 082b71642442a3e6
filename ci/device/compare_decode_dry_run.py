#!/usr/bin/env python3
"""Dry run of compare_decode.py on a machine without a GPU, with the fakes of dry_run_fakes.py
(PyTorch for the CPU, the CUDA pieces faked, ours through the real libfusetune_capi.so on its
CPU backend) and tiny shapes: fp32 decode with GQA (tiny-decode), four new tokens
(tiny-decode-new4), and a prefill of 8 new tokens over a 32-key shared prefix (tiny-prefix).
Paged candidates run where the CPU backend reads a paged cache and are listed as not runnable
otherwise. Checks the control flow, the C API calls and the reports, not the timing.

Usage: /usr/bin/python3 ci/device/compare_decode_dry_run.py --lib build/kernels/capi/libfusetune_capi.so \\
         --out /tmp/decode-dry --rounds 4 --launches 3"""
import sys

import dry_run_fakes

dry_run_fakes.install()
ct = dry_run_fakes.load("compare_torch")
dry_run_fakes.use_cpu_library(ct)
cd = dry_run_fakes.load("compare_decode")
cd.SHAPES["tiny-decode"] = cd.DecodeShape("fp32 b3 hq4 hkv2 d64 cache 40", 3, 4, 2, 1, 40, 64, ct.FP32, "fp32")
cd.SHAPES["tiny-decode-new4"] = cd.DecodeShape("fp32 b2 hq4 hkv1 d64 4 new, cache 33", 2, 4, 1, 4, 33, 64,
                                               ct.FP32, "fp32")
cd.SHAPES["tiny-prefix"] = cd.DecodeShape("fp32 b2 hq2 hkv2 d32 8 new over a 32-key prefix", 2, 2, 2, 8, 40, 32,
                                          ct.FP32, "fp32", 32)
cd.OURS_CONFIGS[:] = ["fused/bm16/bs64/t2/{p}/st1", "fused/bm16/bs32/t1/{p}/st1", "fused/bm64/bs64/t384/{p}/st3"]
if "--shapes" not in sys.argv:
    sys.argv += ["--shapes", "tiny-decode,tiny-decode-new4,tiny-prefix"]
if "--pages" not in sys.argv:
    sys.argv += ["--pages", "16,4"]
sys.exit(cd.main())
