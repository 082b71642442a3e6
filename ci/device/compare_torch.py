#!/usr/bin/env python3
"""Ours vs PyTorch on the issue-3 target shapes, side by side in one process on one GPU.

Ours: libfusetune_capi.so through ctypes on the data_ptr()s of torch tensors (layout
[tokens][heads][head_dim]), timed by fusetune_time (CUDA events around each launch, a 256 MB
memset before each to flush the L2, median of the kept samples). For each variant a few
configs are timed and the fastest is reported (the sweep in the database is the real tuner).

PyTorch: scaled_dot_product_attention with each backend forced through
torch.nn.attention.sdpa_kernel (flash, efficient, cudnn, math) on (b, h, s, d) contiguous
tensors (its preferred layout), and a matmul -> softmax -> matmul; timed the same way
(torch.cuda.Event around each call, a 256 MB zero_() before each, warm-up, median).

Every output is compared with a float64 reference computed on the GPU: |out - ref|max /
|ref|max. Prints a table; writes compare.csv and compare.md under --out.
"""
import argparse
import ctypes
import csv
import math
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FP32, FP16, BF16 = 0, 1, 2
FUSED, PARTIAL, MATERIALIZED = 0, 1, 2
PREC = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
TORCH_DTYPE = {FP32: torch.float32, FP16: torch.float16, BF16: torch.bfloat16}


class Problem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int32), ("q_heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32),
                ("q_len", ctypes.c_int32), ("kv_len", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("causal", ctypes.c_int32), ("dtype", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
                ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
                ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
                ("kv_valid_lens", ctypes.POINTER(ctypes.c_int32))]


class Config(ctypes.Structure):
    _fields_ = [("variant", ctypes.c_int32), ("block_m", ctypes.c_int32), ("block_s", ctypes.c_int32),
                ("threads", ctypes.c_int32), ("precision", ctypes.c_int32), ("stages", ctypes.c_int32),
                ("split_kv", ctypes.c_int32)]


# Candidate configs per variant (keys as KernelConfig::Key prints them, precision filled in).
# The t256/t384/t512 ones with bm64/128/192 are the Hopper (wgmma + TMA) kernel for fp16/bf16.
FUSED_CANDIDATES = ["fused/bm128/bs128/t384/{p}/st3", "fused/bm128/bs128/t384/{p}/st2",
                    "fused/bm192/bs64/t512/{p}/st3", "fused/bm192/bs64/t512/{p}/st2",
                    "fused/bm64/bs128/t256/{p}/st2", "fused/bm128/bs64/t384/{p}/st3",
                    "fused/bm64/bs64/t128/{p}/st2", "fused/bm128/bs64/t256/{p}/st2",
                    "fused/bm128/bs128/t256/{p}/st2", "fused/bm64/bs32/t128/{p}/st2",
                    "fused/bm128/bs64/t256/{p}/st3", "fused/bm64/bs64/t128/{p}/st1",
                    "fused/bm128/bs32/t256/{p}/st2", "fused/bm32/bs64/t128/{p}/st1",
                    "fused/bm64/bs64/t256/{p}/st2", "fused/bm64/bs128/t128/{p}/st2"]
PARTIAL_CANDIDATES = ["partial/bm32/bs64/t256/{p}/st1", "partial/bm64/bs64/t256/{p}/st1",
                      "partial/bm16/bs128/t256/{p}/st1"]
MATERIALIZED_CANDIDATES = ["materialized/bm64/bs64/t128/{p}/st1", "materialized/bm64/bs64/t256/{p}/st1",
                           "materialized/bm64/bs64/t384/{p}/st1", "materialized/bm64/bs64/t512/{p}/st1"]


class Fusetune:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fusetune_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                      ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_config_from_key.argtypes = [ctypes.c_char_p, ctypes.POINTER(Config), ctypes.c_char_p,
                                               ctypes.c_size_t]
        L.fusetune_can_implement.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config),
                                             ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config)] + \
            [ctypes.c_void_p] * 4 + [ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_time.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config)] + \
            [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                                     ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                     ctypes.c_size_t]
        L.fusetune_status_name.restype = ctypes.c_char_p
        self.err = ctypes.create_string_buffer(1024)
        self.handle = ctypes.c_void_p()
        rc = L.fusetune_create(b"cuda", 0, ctypes.byref(self.handle), self.err, len(self.err))
        if rc != 0:
            raise RuntimeError(f"fusetune_create: {self.err.value.decode()}")

    def describe(self):
        buf = ctypes.create_string_buffer(1024)
        self.lib.fusetune_describe(self.handle, buf, len(buf))
        return buf.value.decode()

    def config(self, key):
        c = Config()
        rc = self.lib.fusetune_config_from_key(key.encode(), ctypes.byref(c), self.err, len(self.err))
        if rc != 0:
            raise ValueError(f"{key}: {self.err.value.decode()}")
        return c

    def can_implement(self, problem, config):
        rc = self.lib.fusetune_can_implement(self.handle, ctypes.byref(problem), ctypes.byref(config),
                                             self.err, len(self.err))
        return rc == 0, self.err.value.decode()

    def run(self, problem, config, q, k, v, o):
        rc = self.lib.fusetune_run(self.handle, ctypes.byref(problem), ctypes.byref(config), q.data_ptr(),
                                   k.data_ptr(), v.data_ptr(), o.data_ptr(), self.err, len(self.err))
        if rc != 0:
            raise RuntimeError(f"{self.lib.fusetune_status_name(rc).decode()}: {self.err.value.decode()}")

    def time(self, problem, config, q, k, v, o, warmup, repeats, max_seconds):
        median = ctypes.c_double()
        samples = (ctypes.c_double * repeats)()
        count = ctypes.c_int()
        rc = self.lib.fusetune_time(self.handle, ctypes.byref(problem), ctypes.byref(config), q.data_ptr(),
                                    k.data_ptr(), v.data_ptr(), o.data_ptr(), warmup, repeats, max_seconds, 1,
                                    ctypes.byref(median), samples, repeats, ctypes.byref(count), self.err,
                                    len(self.err))
        if rc != 0:
            raise RuntimeError(f"{self.lib.fusetune_status_name(rc).decode()}: {self.err.value.decode()}")
        return median.value, count.value


def time_torch(fn, flush, warmup, repeats, max_seconds):
    """Median microseconds of fn() with events around each call and an L2 flush before it."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples, t0 = [], time.time()
    for _ in range(repeats):
        flush.zero_()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0)
        if time.time() - t0 > max_seconds and len(samples) >= 3:
            break
    return statistics.median(samples)


def flops(b, h, s, d, causal):
    pairs = s * (s + 1) / 2 if causal else s * s
    return 4.0 * b * h * d * pairs


def rel_error(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return ((out - ref).abs().max() / ref.abs().max()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path to libfusetune_capi.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--max-seconds", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="seed S=2048 and the bf16 shapes only")
    args = ap.parse_args()

    warnings.filterwarnings("ignore")  # sdpa_kernel explains every backend it skips
    torch.manual_seed(0)
    torch.cuda.init()
    ft = Fusetune(args.lib)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()} | ours: {ft.describe()}")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    # (label, batch, heads, seq, head_dim, causal, dtype, precision)
    shapes = []
    seeds = [2048] if args.quick else [128, 256, 512, 1024, 2048]
    for s in seeds:
        shapes.append((f"seed S={s} fp32", 1, 12, s, 64, False, FP32, "fp32"))
    for s in seeds:
        shapes.append((f"seed S={s} tf32", 1, 12, s, 64, False, FP32, "tf32"))
    shapes.append(("seed S=2048 fp16", 1, 12, 2048, 64, False, FP16, "fp16"))
    shapes.append(("bf16 d128 S=4096 b4 h16", 4, 16, 4096, 128, False, BF16, "bf16"))
    shapes.append(("bf16 d128 S=4096 b4 h16 causal", 4, 16, 4096, 128, True, BF16, "bf16"))

    rows = []
    for label, b, h, s, d, causal, dtype, prec in shapes:
        tdt = TORCH_DTYPE[dtype]
        # Ours: [b*s][h][d]; torch: (b, h, s, d) contiguous copies of the same values.
        q = (torch.rand(b, s, h, d, device="cuda") * 2 - 1).to(tdt)
        k = (torch.rand(b, s, h, d, device="cuda") * 2 - 1).to(tdt)
        v = (torch.rand(b, s, h, d, device="cuda") * 2 - 1).to(tdt)
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        scale = 1.0 / math.sqrt(d)
        with torch.no_grad():
            sc = torch.matmul(qt.double(), kt.double().transpose(-1, -2)) * scale
            if causal:
                sc.masked_fill_(torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            ref = torch.matmul(torch.softmax(sc, dim=-1), vt.double())  # (b, h, s, d)
            del sc
        ref_ours = ref.transpose(1, 2)  # (b, s, h, d)
        fl = flops(b, h, s, d, causal)
        problem = Problem(b, h, h, s, s, d, 1 if causal else 0, dtype, 0.0, None, None, None)
        shape_rows = []

        def add(method, config, us, err, note=""):
            shape_rows.append({"shape": label, "method": method, "config": config,
                               "median_us": us, "tflops": (fl / (us * 1e-6) / 1e12) if us else None,
                               "rel_err": err, "note": note})

        for variant, cands in (("fused", FUSED_CANDIDATES), ("partial", PARTIAL_CANDIDATES),
                               ("materialized", MATERIALIZED_CANDIDATES)):
            best, why = None, ""
            for tmpl in cands:
                key = tmpl.format(p=prec)
                cfg = ft.config(key)
                ok, msg = ft.can_implement(problem, cfg)
                if not ok:
                    why = msg
                    continue
                o = torch.full_like(q, float("nan"))
                try:
                    ft.run(problem, cfg, q, k, v, o)
                    err = rel_error(o, ref_ours)
                    us, _ = ft.time(problem, cfg, q, k, v, o, 3, args.repeats, args.max_seconds)
                except RuntimeError as e:
                    why = str(e)
                    continue
                if best is None or us < best[1]:
                    best = (key, us, err)
            if best is None:
                add(f"ours {variant}", "-", None, None, why[:80])
            else:
                add(f"ours {variant}", best[0], best[1], best[2])

        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)):
            def fn(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            try:
                with torch.no_grad():
                    out = fn()
                    err = rel_error(out, ref)
                    us = time_torch(fn, flush, 3, args.repeats, args.max_seconds)
                add(f"torch sdpa {name}", "-", us, err)
            except Exception as e:  # a backend that cannot run this dtype/shape
                add(f"torch sdpa {name}", "-", None, None, str(e).splitlines()[0][:80])
        mask = torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1) if causal else None

        def unfused():
            sc = torch.matmul(qt, kt.transpose(-1, -2)) * scale
            if mask is not None:
                sc = sc.masked_fill(mask, float("-inf"))
            return torch.matmul(torch.softmax(sc, dim=-1), vt)
        with torch.no_grad():
            err = rel_error(unfused(), ref)
            us = time_torch(unfused, flush, 3, args.repeats, args.max_seconds)
        add("torch matmul-softmax-matmul", "-", us, err)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        mat = next((r["median_us"] for r in shape_rows if r["method"] == "ours materialized"), None)
        for r in shape_rows:
            r["vs_ours_materialized"] = (mat / r["median_us"]) if (mat and r["median_us"]) else None
            us = f"{r['median_us']:.1f}" if r["median_us"] else "n/a"
            tf = f"{r['tflops']:.1f}" if r["tflops"] else ""
            er = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else ""
            sp = f"{r['vs_ours_materialized']:.2f}x" if r["vs_ours_materialized"] else ""
            print(f"{label:32s} {r['method']:28s} {us:>9s} us {tf:>7s} TF/s err {er:>8s} {sp:>7s} "
                  f"{r['config']} {r['note']}")
        rows.extend(shape_rows)
        del q, k, v, qt, kt, vt, ref, ref_ours
        torch.cuda.empty_cache()

    fields = ["shape", "method", "config", "median_us", "tflops", "rel_err", "vs_ours_materialized", "note"]
    with open(os.path.join(args.out, "compare.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in fields})
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write("| shape | method | config | median µs | TFLOP/s | rel. error | speedup vs ours materialized |\n")
        f.write("|---|---|---|---:|---:|---:|---:|\n")
        for r in rows:
            us = f"{r['median_us']:.1f}" if r["median_us"] else f"n/a ({r['note']})"
            tf = f"{r['tflops']:.1f}" if r["tflops"] else ""
            er = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else ""
            sp = f"{r['vs_ours_materialized']:.2f}x" if r.get("vs_ours_materialized") else ""
            f.write(f"| {r['shape']} | {r['method']} | {r['config']} | {us} | {tf} | {er} | {sp} |\n")
    print(f"wrote {args.out}/compare.csv and compare.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
