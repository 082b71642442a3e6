#!/usr/bin/env python3
"""Dry run of compare_torch.py on a machine without a GPU, with the fakes of dry_run_fakes.py
(PyTorch for the CPU, the CUDA pieces faked, ours through the real libfusetune_capi.so on its
CPU backend), tiny shapes (tiny-fp32, tiny-fp32-causal,
tiny-bf16), and the profiler of --cupti-check and --kernel-times replaced by kernel events
made from the timer's samples (REAL_PROFILER=1 keeps torch.profiler). Checks the control flow, the C API calls and
the reports, not the timing.

Usage: /usr/bin/python3 ci/device/compare_torch_dry_run.py --lib build/kernels/capi/libfusetune_capi.so \
         --out /tmp/compare-dry --shapes tiny-fp32,tiny-bf16 --rounds 4 --launches 3 [--cupti-check ...]"""
import os, sys

import dry_run_fakes

dry_run_fakes.install()
ct = dry_run_fakes.load("compare_torch")
dry_run_fakes.use_cpu_library(ct)
ct.SHAPES["tiny-fp32"] = ct.Shape("fp32 b1 h2 d64 S=64", 1, 2, 64, 64, False, ct.FP32, "fp32")
ct.SHAPES["tiny-fp32-causal"] = ct.Shape("fp32 b2 h2 d64 S=48 causal", 2, 2, 48, 64, True, ct.FP32, "fp32")
ct.SHAPES["tiny-bf16"] = ct.Shape("bf16 b1 h2 d64 S=32", 1, 2, 32, 64, False, ct.BF16, "bf16")
ct.SHAPES["tiny-fp32-gqa"] = ct.Shape("fp32 b1 hq4 hkv2 d64 S=40 causal", 1, 4, 40, 64, True, ct.FP32, "fp32", 2)
ct.CONFIG_CANDIDATES["ours"] = ["fused/bm64/bs64/t2/{p}/st1", "fused/bm32/bs32/t1/{p}/st1", "fused/bm64/bs64/t384/{p}/st3"]
ct.CONFIG_CANDIDATES["ours-materialized"] = ["materialized/bm64/bs64/t1/{p}/st1", "materialized/bm64/bs64/t2/{p}/st1"]

# --- profiler: fake kernel events shaped like a real trace
def fake_profiled(fn, trace_dir, tag):
    result = fn()
    if isinstance(result, tuple):
        return result, [("noise_fill", 0.0, 1.0)]
    if isinstance(result, list) and result and isinstance(result[0], tuple):  # rounds (--kernel-times): per block
        ev, t = [], 0.0                                                        # 2 warm-up launches, then the samples
        for _, played, _ in result:
            for _, samples, *_ in played:
                for s in [5.0, 5.0] + samples:
                    ev += [("noise_fill", t, 1.0), ("k", t + 1.0, s * 0.97)]
                    t += 2.0
        return result, ev
    if isinstance(result, list):  # a timer's samples: warm-up launches first, then one kernel per sample
        ev = [("k", 0.0, 5.0)] * 2 + [("noise_fill", 0.0, 1.0)] + [("k", float(i), s * 0.97) for i, s in enumerate(result)]
        return result, ev
    return result, [("k", 0.0, 5.0)]
if not os.environ.get("REAL_PROFILER"): ct.profiled = fake_profiled
if "--cupti-check" in sys.argv and "--cupti-shapes" not in sys.argv:
    sys.argv += ["--cupti-shapes", "tiny-fp32,tiny-bf16"]
if "--shapes" not in sys.argv:
    sys.argv += ["--shapes", "tiny-fp32,tiny-fp32-causal,tiny-bf16"]
sys.exit(ct.main())
