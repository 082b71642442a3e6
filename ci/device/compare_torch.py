#!/usr/bin/env python3
"""Ours vs PyTorch SDPA, measured interleaved on one GPU; and a check of our timer against CUPTI.

Comparison (default mode). For each shape the candidates are
  ours               the fused kernel through libfusetune_capi.so + ctypes on the data_ptr()s of
                     torch tensors (layout [tokens][heads][head_dim]); the config given with
                     --config SHAPE=KEY, else the fastest of a short candidate list (one block
                     each, measured first);
  ours+LABEL         (--also LABEL=KEY[@LIB], repeatable) a further fused config of ours in the
                     same rounds, run by another build's libfusetune_capi.so when LIB is given:
                     two schedules, or two builds' kernels, side by side;
  ours-materialized  the materialized baseline, the fastest of its softmax thread counts;
  ours-queued        (with --candidates) ours' config launched as the torch candidates are:
                     fusetune_run_on_stream on torch's current stream inside torch's timing
                     loop below (queued behind a spin, torch's L2 flush, events), not through
                     fusetune_time; with --kernel-times it tells whether ours and torch's
                     timing paths leave a kernel the same start;
  cudnn, flash, efficient (and math, unfused with --candidates): scaled_dot_product_attention
                     with the backend forced through torch.nn.attention.sdpa_kernel, on
                     (b, h, s, d) contiguous copies of the same values;
  cudnn-bshd, flash-bshd, efficient-bshd (with --candidates): the same backends on (b, h, s, d)
                     views of ours' own tensors (transpose(1, 2), not copied): the memory and
                     layout ours reads, as a model passes its projections to SDPA: a head's
                     rows lie heads * head_dim elements apart, where the copies give each head
                     one contiguous block.
Every candidate's output is first checked against a float64 reference computed on the GPU
(|out - ref|max / |ref|max, ours on a NaN-poisoned output); one that fails or cannot run is
left out of the timing and listed with the reason.

Then R rounds (--rounds, default 15), each a fresh random order of the candidates; each
candidate one block per round: 2 warm-up launches, then N (--launches) launches each timed
with CUDA events, the block's value = the median of its N. Before every timed launch a
256 MiB buffer is read (L2 flush: reading leaves clean lines; a write would leave ~50 MB of dirty
lines that the measured kernel writes back, see kernels/cuda/l2_flush.h) unless --steady
(back-to-back launches, warm L2).
  ours: fusetune_time (events around each launch, host sync after each; with --steady the
        event-to-kernel launch latency stays inside each sample: --cupti-check measures it);
  torch: the whole block is queued behind a short spin kernel (torch.cuda._sleep), so that
        Python's dispatch time never sits between a start event and its kernel.
Per block the SM clock, power draw and throttle reasons are read before and after (NVML via
pynvml; else nvidia-smi at round boundaries); a block whose clock moved by more than 2 % or
whose throttle reasons changed is counted as unsteady.

Reported per shape: per candidate the median of its block values (and p10/p90 over rounds),
TFLOP/s and error; per pair (ours / X, and ours+LABEL / cudnn) the median of the per-round ratios with its 90 %
confidence interval (order statistics of the per-round ratios: the distribution-free
interval for a median; its exact coverage is printed). Writes compare.csv (every block) and
compare.md (the tables) under --out, prints the tables last.

Timer check (--cupti-check). For each --cupti-shapes shape: ours (as above) timed by
fusetune_time with the flush off (steady back-to-back launches) and on, once plainly and
once under torch.profiler (ProfilerActivity.CUDA: kernel durations from CUPTI) for the same
launches; each --also config (in its own build where it names one) likewise; the torch cuDNN
(else flash/efficient) kernel likewise with this script's own timer. Prints timer median, CUPTI median and the gap in %; writes cupti_check.csv and
cupti_check.md. Nsight Systems is an alternative where it exists (the H200 host measured had no
working nsys when last checked): nsys profile --stats=true python3 compare_torch.py
--cupti-check ... gives the same kernel durations in its cuda_gpu_kern_sum table. Nsight Compute
works there: ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum
times each kernel alone with the caches flushed (comparable to the flush mode, not to steady).

--self-test checks the statistics and the report writer on synthetic blocks (no GPU, no torch).
"""
import argparse
import csv
import ctypes
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --self-test runs without torch
    torch = None

FP32, FP16, BF16 = 0, 1, 2
PRECISION_CODE = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}  # fusetune_precision
TORCH_DTYPE_NAME = {FP32: "float32", FP16: "float16", BF16: "bfloat16"}
L2_FLUSH_BYTES = 256 << 20
# Verification: |out - ref|max / |ref|max above the library's tolerance for the shape's
# precision and dtype (Fusetune.tolerance: the C ABI's fusetune_tolerance) fails.
UNSTEADY_CLOCK_FRACTION = 0.02   # as DeviceStateMoved in the C++ backend
NVML_IDLE_REASON = 0x1
THROTTLE_REASON_NAMES = {0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                         0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}


@dataclass(frozen=True)
class Shape:
    label: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    dtype: int
    precision: str
    kv_heads: int = 0  # GQA: K/V heads (0 = heads)

    def kv(self):
        return self.kv_heads or self.heads

    def flops(self):
        pairs = self.seq * (self.seq + 1) / 2 if self.causal else self.seq * self.seq
        return 4.0 * self.batch * self.heads * self.head_dim * pairs


def seed_shapes(lib_path):
    """The seed shapes (the library's `seed` preset, fusetune_seed_problems), in exact fp32 and in
    tf32, by id ("fp32-d64-s2048")."""
    lib = ctypes.CDLL(lib_path)
    count = ctypes.c_size_t()
    if lib.fusetune_seed_problems(None, ctypes.c_size_t(0), ctypes.byref(count)) != 0:
        raise RuntimeError("fusetune_seed_problems failed")
    problems = (Problem * count.value)()
    if lib.fusetune_seed_problems(problems, ctypes.c_size_t(count.value), ctypes.byref(count)) != 0:
        raise RuntimeError("fusetune_seed_problems failed")
    out = {}
    for p in problems:
        b, h, s, d = p.batch, p.q_heads, p.q_len, p.head_dim
        for precision in ("fp32", "tf32"):
            out[f"{precision}-d{d}-s{s}"] = Shape(f"{precision} b{b} h{h} d{d} S={s}", b, h, s, d, bool(p.causal),
                                                  p.dtype, precision)
    return out


# The seed shapes join these once the library is known (main: seed_shapes).
SHAPES = {
    "fp16-d64-s2048": Shape("fp16 b1 h12 d64 S=2048", 1, 12, 2048, 64, False, FP16, "fp16"),
    "bf16-d128-s4096": Shape("bf16 b4 h16 d128 S=4096", 4, 16, 4096, 128, False, BF16, "bf16"),
    "bf16-d128-s4096-causal": Shape("bf16 b4 h16 d128 S=4096 causal", 4, 16, 4096, 128, True, BF16, "bf16"),
    "fp16-d128-s1024-b8": Shape("fp16 b8 h16 d128 S=1024", 8, 16, 1024, 128, False, FP16, "fp16"),
    "bf16-d128-s4096-gqa-causal": Shape("bf16 b2 hq32 hkv8 d128 S=4096 causal", 2, 32, 4096, 128, True, BF16, "bf16",
                                        8),
    "bf16-d128-s16384-causal": Shape("bf16 b1 h16 d128 S=16384 causal", 1, 16, 16384, 128, True, BF16, "bf16"),
    "fp16-d64-s4096": Shape("fp16 b4 h16 d64 S=4096", 4, 16, 4096, 64, False, FP16, "fp16"),
}
# Any other shape by an id that spells it out: PRECISION-dD-sS-bB-hH[-kvKV][-causal], e.g.
# fp16-d128-s512-b16-h16 or bf16-d128-s4096-b2-h32-kv8-causal (shape_of_id).
_SHAPE_ID = re.compile(r"^(fp16|bf16)-d(\d+)-s(\d+)-b(\d+)-h(\d+)(?:-kv(\d+))?(-causal)?$")


def shape_of_id(shape_id):
    """The Shape a spelled-out id names, or None when it is not of that form."""
    m = _SHAPE_ID.match(shape_id)
    if not m:
        return None
    precision, d, s, b, h, kv, causal = m.groups()
    b, h, s, d, kv = int(b), int(h), int(s), int(d), int(kv or 0)
    if min(b, h, s, d) < 1 or (kv and h % kv):
        return None
    heads = f"hq{h} hkv{kv}" if kv else f"h{h}"
    label = f"{precision} b{b} {heads} d{d} S={s}" + (" causal" if causal else "")
    return Shape(label, b, h, s, d, bool(causal), FP16 if precision == "fp16" else BF16, precision, kv)


def add_spelled_shapes(text):
    """Registers the spelled-out ids of a comma-separated list in SHAPES (named ones stay)."""
    for shape_id in (x for x in text.split(",") if x and x not in SHAPES):
        shape = shape_of_id(shape_id)
        if shape is not None:
            SHAPES[shape_id] = shape


DEFAULT_SHAPES = ["fp16-d64-s2048", "bf16-d128-s4096", "bf16-d128-s4096-causal", "fp32-d64-s2048"]
DEFAULT_CUPTI_SHAPES = ["fp16-d64-s2048", "bf16-d128-s4096"]
# SDPA's fused backends also run on the memory ours reads ("-bshd": (b, h, s, d) views of the
# [b*s][h][d] tensors, as a model passes them after transpose(1, 2)), not only on contiguous copies.
TORCH_FUSED = ["cudnn", "flash", "efficient"]
TORCH_ON_OURS_SUFFIX = "-bshd"
ALL_CANDIDATES = ["ours", "ours-partial", "ours-materialized", "ours-queued", *TORCH_FUSED, "math", "unfused",
                  *(name + TORCH_ON_OURS_SUFFIX for name in TORCH_FUSED)]
DEFAULT_CANDIDATES = ["ours", "ours-materialized", "cudnn", "flash", "efficient"]
# Candidates that run another candidate's config (its --config key, else its candidate list).
CONFIG_OF = {"ours-queued": "ours"}

# Candidate configs per variant (keys as KernelConfig::Key prints them, precision filled in).
# The t256/t384/t512 ones with bm64/128/192 are the Hopper (wgmma + TMA) kernel for fp16/bf16.
CONFIG_CANDIDATES = {
    "ours": ["fused/bm128/bs128/t384/{p}/st3", "fused/bm128/bs128/t384/{p}/st2",
             "fused/bm192/bs64/t512/{p}/st3", "fused/bm192/bs64/t512/{p}/st2",
             "fused/bm64/bs128/t256/{p}/st2", "fused/bm128/bs64/t384/{p}/st3",
             "fused/bm64/bs64/t128/{p}/st2", "fused/bm128/bs64/t256/{p}/st2",
             "fused/bm128/bs128/t256/{p}/st2", "fused/bm64/bs32/t128/{p}/st2",
             "fused/bm128/bs64/t256/{p}/st3", "fused/bm64/bs64/t128/{p}/st1",
             "fused/bm128/bs32/t256/{p}/st2", "fused/bm32/bs64/t128/{p}/st1",
             "fused/bm64/bs64/t256/{p}/st2", "fused/bm64/bs128/t128/{p}/st2"],
    "ours-partial": ["partial/bm32/bs64/t256/{p}/st1", "partial/bm64/bs64/t256/{p}/st1",
                     "partial/bm16/bs128/t256/{p}/st1"],
    "ours-materialized": ["materialized/bm64/bs64/t128/{p}/st1", "materialized/bm64/bs64/t256/{p}/st1",
                          "materialized/bm64/bs64/t384/{p}/st1", "materialized/bm64/bs64/t512/{p}/st1"],
}
VARIANT_OF_PREFIX = {"fused": "ours", "partial": "ours-partial", "materialized": "ours-materialized"}


# ---------------------------------------------------------------- statistics (no torch)

def median_ci(values, confidence=0.90):
    """(median, low, high, coverage): the distribution-free interval for a median from order
    statistics, [x_(k), x_(n+1-k)] with the largest k whose two tails hold at most
    (1 - confidence) / 2 each; coverage is that interval's exact confidence. With too few
    values for the asked confidence the interval is [min, max] with its (lower) coverage."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        return None, None, None, 0.0
    med = statistics.median(x)
    tail_limit = (1.0 - confidence) / 2.0
    k, tail = 0, 0.0
    for j in range(n + 1):
        p = math.comb(n, j) / 2.0 ** n
        if tail + p > tail_limit + 1e-12:
            break
        tail += p
        k = j + 1
    if k == 0:  # even [min, max] misses the asked confidence
        return med, x[0], x[-1], 1.0 - 2.0 * (1.0 / 2.0 ** n)
    k = min(k, (n + 1) // 2)
    return med, x[k - 1], x[n - k], 1.0 - 2.0 * tail


def quantile(values, q):
    x = sorted(values)
    if not x:
        return None
    pos = q * (len(x) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (x[hi] - x[lo]) * (pos - lo)


def reasons_text(mask):
    if mask is None:
        return ""
    names = [n for bit, n in THROTTLE_REASON_NAMES.items() if mask & bit]
    return "+".join(names) if names else "none"


def state_moved(before, after):
    if not before or not after or before.get("sm_mhz") is None or after.get("sm_mhz") is None:
        return False
    b, a = before["sm_mhz"], after["sm_mhz"]
    if b <= 0 or a <= 0:
        return False
    if abs(a - b) > UNSTEADY_CLOCK_FRACTION * b:
        return True
    return before.get("reasons") != after.get("reasons")


def add_pair(pair_rows, shape, label, num, den):
    """Appends the pair row of num / den (block values by round): the median of the per-round
    ratios over the rounds both hold, with its interval and verdict; nothing without rounds."""
    common = sorted(set(num) & set(den))
    ratios = [num[r] / den[r] for r in common if den[r] > 0]
    med, low, high, cover = median_ci(ratios)
    if med is None:
        return
    verdict = "ours faster" if high < 1 else ("ours slower" if low > 1 else "level (CI holds 1)")
    pair_rows.append({"shape": shape, "pair": label, "rounds": len(ratios), "median_ratio": med, "ci_low": low,
                      "ci_high": high, "coverage": cover, "verdict": verdict})


def summarize(blocks, candidates_by_shape, flops_by_shape):
    """blocks: dicts with shape, round, candidate, median_us, unsteady. Returns (per-candidate
    rows, per-pair rows), both lists of dicts, in shape order then candidate order. The rate
    ("tflops") is flops_by_shape[shape] / time / 1e12: TFLOP/s for flops, TB/s for bytes."""
    cand_rows, pair_rows = [], []
    for shape, cands in candidates_by_shape.items():
        per = {c["name"]: {} for c in cands}
        unsteady = {c["name"]: 0 for c in cands}
        for b in blocks:
            if b["shape"] == shape and b["candidate"] in per:
                per[b["candidate"]][b["round"]] = b["median_us"]
                unsteady[b["candidate"]] += 1 if b.get("unsteady") else 0
        for c in cands:
            vals = list(per[c["name"]].values())
            med = statistics.median(vals) if vals else None
            cand_rows.append({"shape": shape, "candidate": c["name"], "config": c.get("config", "-"),
                              "rounds": len(vals), "median_us": med,
                              "p10_us": quantile(vals, 0.1), "p90_us": quantile(vals, 0.9),
                              "tflops": flops_by_shape[shape] / (med * 1e-6) / 1e12 if med else None,
                              "rel_err": c.get("rel_err"), "unsteady_blocks": unsteady[c["name"]],
                              "note": c.get("note", "")})
        ours = per.get("ours")
        if not ours:
            continue
        for c in cands:
            if c["name"] != "ours" and per[c["name"]]:
                add_pair(pair_rows, shape, f"ours / {c['name']}", ours, per[c["name"]])
        # Each further config of ours (--also) against cuDNN too.
        for c in cands:
            if c["name"].startswith("ours+") and per[c["name"]] and per.get("cudnn"):
                add_pair(pair_rows, shape, f"{c['name']} / cudnn", per[c["name"]], per["cudnn"])
    return cand_rows, pair_rows


def fmt(v, spec):
    return format(v, spec) if v is not None else ""


def write_report(out_dir, mode_text, blocks, cand_rows, pair_rows, device_text, state_ranges, rate_label="TFLOP/s",
                 rate_format=".1f"):
    fields = ["shape", "round", "position", "candidate", "config", "median_us", "min_us", "max_us", "launches",
              "timer_median_us", "sm_mhz_before", "sm_mhz_after", "power_w_before", "power_w_after", "reasons_before",
              "reasons_after", "unsteady", "state_source"]
    with open(os.path.join(out_dir, "compare.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for b in blocks:
            w.writerow(b)
    lines = [f"Interleaved comparison: {mode_text}", f"Device: {device_text}", ""]
    lines.append(f"| shape | candidate | config | median µs | p10–p90 µs | {rate_label} | rel. error | rounds | unsteady blocks |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in cand_rows:
        if r["median_us"] is None:
            lines.append(f"| {r['shape']} | {r['candidate']} | {r['config']} | n/a ({r['note']}) | | | "
                         f"{fmt(r['rel_err'], '.1e')} | 0 | |")
            continue
        lines.append(f"| {r['shape']} | {r['candidate']} | {r['config']} | {r['median_us']:.1f} | "
                     f"{r['p10_us']:.1f}–{r['p90_us']:.1f} | {fmt(r['tflops'], rate_format)} | {fmt(r['rel_err'], '.1e')} | "
                     f"{r['rounds']} | {r['unsteady_blocks']} |")
    lines += ["", "Per pair: median over rounds of ours / X (same round), 90 % CI from order statistics "
              "(coverage: the interval's exact confidence).", ""]
    lines.append("| shape | pair | median ratio | 90 % CI | coverage | rounds | verdict |")
    lines.append("|---|---|---:|---:|---:|---:|---|")
    for p in pair_rows:
        lines.append(f"| {p['shape']} | {p['pair']} | {p['median_ratio']:.3f} | {p['ci_low']:.3f}–{p['ci_high']:.3f} | "
                     f"{p['coverage']:.3f} | {p['rounds']} | {p['verdict']} |")
    if state_ranges:
        lines += ["", "| shape | SM MHz min–max | power W min–max | throttle reasons seen |", "|---|---|---|---|"]
        for shape, s in state_ranges.items():
            lines.append(f"| {shape} | {s['mhz']} | {s['power']} | {s['reasons']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "compare.md"), "w") as f:
        f.write(text)
    return text


def state_ranges_of(blocks):
    out = {}
    for shape in dict.fromkeys(b["shape"] for b in blocks):
        mhz = [v for b in blocks if b["shape"] == shape for v in (b.get("sm_mhz_before"), b.get("sm_mhz_after"))
               if isinstance(v, (int, float)) and v > 0]
        pw = [v for b in blocks if b["shape"] == shape for v in (b.get("power_w_before"), b.get("power_w_after"))
              if isinstance(v, (int, float)) and v > 0]
        reasons = sorted({r for b in blocks if b["shape"] == shape
                          for r in (b.get("reasons_before"), b.get("reasons_after")) if r})
        out[shape] = {"mhz": f"{min(mhz)}–{max(mhz)}" if mhz else "unknown",
                      "power": f"{min(pw):.0f}–{max(pw):.0f}" if pw else "unknown",
                      "reasons": ", ".join(reasons) if reasons else "unknown"}
    return out


# ---------------------------------------------------------------- device state

class DeviceStateReader:
    """SM clock (MHz), power (W) and throttle reasons (NVML bitmask, idle bit cleared)."""

    def __init__(self, cuda_index):
        self.source = "none"
        self.nvml = None
        self.handle = None
        self.smi_index = str(cuda_index)
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = self._nvml_handle(pynvml, cuda_index)
            self.reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
            self.read()
            self.source = "nvml"
        except Exception as e:  # no pynvml, or NVML refuses: fall back to nvidia-smi
            print(f"pynvml unavailable ({e}); reading nvidia-smi at round boundaries")
            self.nvml = None
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi"

    @staticmethod
    def _nvml_handle(pynvml, cuda_index):
        uuid = None
        try:
            uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        except Exception:
            pass
        if uuid:
            for candidate in (uuid, "GPU-" + uuid):
                try:
                    return pynvml.nvmlDeviceGetHandleByUUID(candidate.encode())
                except Exception:
                    continue
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)

    @property
    def per_block(self):
        return self.source == "nvml"

    def read(self):
        if self.nvml is not None:
            n = self.nvml
            try:
                return {"sm_mhz": int(n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM)),
                        "power_w": n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                        "reasons": int(self.reasons_fn(self.handle)) & ~NVML_IDLE_REASON}
            except Exception as e:  # a reading that fails mid-run leaves the block's state unknown
                if self.source != "nvml":  # the probe in __init__: let it fall back
                    raise
                print(f"NVML reading failed: {e}")
                return {}
        if self.source == "nvidia-smi":
            return read_nvidia_smi(self.smi_index)
        return {}


def read_nvidia_smi(index):
    """One nvidia-smi query (~20 ms): SM clock, power, active clocks-event reasons."""
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        try:
            out = subprocess.run(["nvidia-smi", "-i", index, f"--query-gpu=clocks.sm,power.draw,{field}",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return {}
        if out.returncode != 0:
            continue
        parts = [p.strip() for p in out.stdout.strip().splitlines()[0].split(",")]
        if len(parts) < 3:
            return {}
        state = {}
        try:
            state["sm_mhz"] = int(float(parts[0]))
        except ValueError:
            pass
        try:
            state["power_w"] = float(parts[1])
        except ValueError:
            pass
        try:
            state["reasons"] = int(parts[2], 16) & ~NVML_IDLE_REASON
        except ValueError:
            pass
        return state
    return {}


# ---------------------------------------------------------------- ours through the C API

class Problem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int32), ("q_heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32),
                ("q_len", ctypes.c_int32), ("kv_len", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("causal", ctypes.c_int32), ("dtype", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
                ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
                ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
                ("kv_valid_lens", ctypes.POINTER(ctypes.c_int32))]


class LaunchStruct(ctypes.Structure):
    # fusetune_launch.
    _fields_ = [("stream", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("kv_valid_lens", ctypes.c_void_p)]


class Config(ctypes.Structure):
    # fusetune_config of C ABI version 2 (fusetune_config_from_key writes every field).
    _fields_ = [("variant", ctypes.c_int32), ("block_m", ctypes.c_int32), ("block_s", ctypes.c_int32),
                ("threads", ctypes.c_int32), ("precision", ctypes.c_int32), ("stages", ctypes.c_int32),
                ("split_kv", ctypes.c_int32), ("pingpong", ctypes.c_int32), ("persistent", ctypes.c_int32)]


class Fusetune:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fusetune_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                      ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        # A kernel variant's libfusetune_hopper_dev.so (kernels/cuda/dev/build_hopper_dev.sh) has
        # neither the key parser nor the tolerance table: it serves as an --also library, whose
        # configs and tolerances come from the --lib library.
        self.full = hasattr(L, "fusetune_config_from_key") and hasattr(L, "fusetune_tolerance")
        if self.full:
            L.fusetune_config_from_key.argtypes = [ctypes.c_char_p, ctypes.POINTER(Config), ctypes.c_char_p,
                                                   ctypes.c_size_t]
            L.fusetune_tolerance.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        L.fusetune_can_implement.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config),
                                             ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config)] + \
            [ctypes.c_void_p] * 4 + [ctypes.c_char_p, ctypes.c_size_t]
        if hasattr(L, "fusetune_run_on_stream"):  # not in a kernel variant's dev library
            L.fusetune_run_on_stream.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.c_void_p,
                                                 ctypes.POINTER(Config)] + [ctypes.c_void_p] * 4 + \
                [ctypes.POINTER(LaunchStruct), ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_time.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Config)] + \
            [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                                     ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                     ctypes.c_size_t]
        L.fusetune_status_name.restype = ctypes.c_char_p
        self.path = path
        self.err = ctypes.create_string_buffer(1024)
        self.handle = ctypes.c_void_p()
        rc = L.fusetune_create(b"cuda", torch.cuda.current_device(), ctypes.byref(self.handle), self.err,
                               len(self.err))
        if rc != 0:
            raise RuntimeError(f"fusetune_create: {self.err.value.decode()}")

    def _need_full(self, what):
        if not self.full:
            raise SystemExit(f"{self.path} has no {what} (a kernel variant's dev library?): pass the full "
                             "libfusetune_capi.so as --lib and the variant with --also LABEL=KEY@LIB")

    def tolerance(self, precision, dtype):
        """The library's verification tolerance for a precision name and a dtype (FP32, ...)."""
        self._need_full("fusetune_tolerance")
        out = ctypes.c_double()
        rc = self.lib.fusetune_tolerance(PRECISION_CODE[precision], dtype, ctypes.byref(out))
        if rc != 0:
            self._fail(f"fusetune_tolerance({precision}, {dtype})", rc)
        return out.value

    def describe(self):
        buf = ctypes.create_string_buffer(1024)
        self.lib.fusetune_describe(self.handle, buf, len(buf))
        return buf.value.decode()

    def config(self, key):
        self._need_full("fusetune_config_from_key")
        c = Config()
        rc = self.lib.fusetune_config_from_key(key.encode(), ctypes.byref(c), self.err, len(self.err))
        if rc != 0:
            raise ValueError(f"{key}: {self.err.value.decode()}")
        return c

    def can_implement(self, problem, config):
        rc = self.lib.fusetune_can_implement(self.handle, ctypes.byref(problem), ctypes.byref(config),
                                             self.err, len(self.err))
        return rc == 0, self.err.value.decode()

    def _fail(self, what, rc):
        raise RuntimeError(f"{what}: {self.lib.fusetune_status_name(rc).decode()}: {self.err.value.decode()}")

    def run(self, problem, config, q, k, v, o):
        rc = self.lib.fusetune_run(self.handle, ctypes.byref(problem), ctypes.byref(config), q.data_ptr(),
                                   k.data_ptr(), v.data_ptr(), o.data_ptr(), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_run", rc)

    def run_on_stream(self, problem, config, q, k, v, o, stream):
        """Enqueues one launch on `stream` (a cudaStream_t as an int; 0 = the legacy default
        stream) and returns without synchronizing."""
        launch = LaunchStruct(stream or None, None, None, None)
        rc = self.lib.fusetune_run_on_stream(self.handle, ctypes.byref(problem), None, ctypes.byref(config),
                                             q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                             ctypes.byref(launch), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_run_on_stream", rc)

    def time(self, problem, config, q, k, v, o, warmup, repeats, flush_l2):
        """Samples (µs) of `repeats` launches, each timed alone; no early stop."""
        median = ctypes.c_double()
        samples = (ctypes.c_double * repeats)()
        count = ctypes.c_int()
        rc = self.lib.fusetune_time(self.handle, ctypes.byref(problem), ctypes.byref(config), q.data_ptr(),
                                    k.data_ptr(), v.data_ptr(), o.data_ptr(), warmup, repeats, 1e6,
                                    1 if flush_l2 else 0, ctypes.byref(median), samples, repeats,
                                    ctypes.byref(count), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_time", rc)
        return list(samples[:count.value])


# ---------------------------------------------------------------- per-shape setup

class ShapeBench:
    """Inputs, the fp64 reference and the runnable candidates of one shape."""

    def __init__(self, shape, ft, flush, spin_us_per_launch):
        s = shape
        self.shape, self.ft, self.flush, self.spin_us_per_launch = s, ft, flush, spin_us_per_launch
        self.ft_of = {}  # candidate name -> another build's library (--also LABEL=KEY@LIB)
        tdt = getattr(torch, TORCH_DTYPE_NAME[s.dtype])
        b, h, n, d = s.batch, s.heads, s.seq, s.head_dim
        hkv = s.kv()
        # Ours: [b*s][h][d]; torch: (b, h, s, d) contiguous copies of the same values.
        self.q = (torch.rand(b, n, h, d, device="cuda") * 2 - 1).to(tdt)
        self.k = (torch.rand(b, n, hkv, d, device="cuda") * 2 - 1).to(tdt)
        self.v = (torch.rand(b, n, hkv, d, device="cuda") * 2 - 1).to(tdt)
        self.qt, self.kt, self.vt = (x.transpose(1, 2).contiguous() for x in (self.q, self.k, self.v))
        self.scale = 1.0 / math.sqrt(d)
        with torch.no_grad():
            # GQA: query head i reads K/V head i // (h / hkv) (the reference widens K/V).
            kd = self.kt.double().repeat_interleave(h // hkv, dim=1)
            sc = torch.matmul(self.qt.double(), kd.transpose(-1, -2)) * self.scale
            del kd
            if s.causal:
                sc.masked_fill_(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            self.ref = torch.matmul(torch.softmax(sc, dim=-1),
                                    self.vt.double().repeat_interleave(h // hkv, dim=1))  # (b, h, s, d)
            del sc
        self.ref_ours = self.ref.transpose(1, 2)  # (b, s, h, d)
        self.problem = Problem(b, h, hkv, n, n, d, 1 if s.causal else 0, s.dtype, 0.0, None, None, None)
        self.mask = torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1) if s.causal else None
        self.o = torch.empty_like(self.q)

    def _ft(self, name):
        """The library that runs candidate `name`: its own build's, else ours."""
        return self.ft_of.get(name, self.ft)

    def rel_error(self, out, ref):
        out = out.double()
        if not torch.isfinite(out).all():
            return float("nan")
        return ((out - ref).abs().max() / ref.abs().max()).item()

    # The hooks prepare_candidates calls for an ours* candidate `name` (one problem here).
    def can_implement(self, cfg, name="ours"):
        return self._ft(name).can_implement(self.problem, cfg)

    def verify_ours(self, cfg, name="ours"):
        o = torch.full_like(self.q, float("nan"))
        self._ft(name).run(self.problem, cfg, self.q, self.k, self.v, o)
        return self.rel_error(o, self.ref_ours)

    # ours: one block = fusetune_time (warm-up, then `launches` launches each timed alone)
    def ours_block(self, cfg, warmup, launches, name="ours"):
        if name == "ours-queued":
            def launch():
                self._ft(name).run_on_stream(self.problem, cfg, self.q, self.k, self.v, self.o,
                                             torch.cuda.current_stream().cuda_stream)
            return torch_calls_block(launch, None, warmup, launches, self.flush, self.spin_us_per_launch)
        return self._ft(name).time(self.problem, cfg, self.q, self.k, self.v, self.o, warmup, launches,
                                   self.flush is not None)

    def torch_fn(self, name):
        s = self.shape
        if name == "unfused":
            def unfused():
                sc = torch.matmul(self.qt, self.kt.transpose(-1, -2)) * self.scale
                if self.mask is not None:
                    sc = sc.masked_fill(self.mask, float("-inf"))
                return torch.matmul(torch.softmax(sc, dim=-1), self.vt)
            return unfused, None
        from torch.nn.attention import SDPBackend
        on_ours = name.endswith(TORCH_ON_OURS_SUFFIX)
        name = name.removesuffix(TORCH_ON_OURS_SUFFIX)
        backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]

        gqa = {"enable_gqa": True} if s.kv() != s.heads else {}
        if on_ours:
            q, k, v = (x.transpose(1, 2) for x in (self.q, self.k, self.v))
        else:
            q, k, v = self.qt, self.kt, self.vt

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, is_causal=s.causal, **gqa)
        return sdpa, backend

    def ours_single(self, cfg, name="ours"):
        self._ft(name).run(self.problem, cfg, self.q, self.k, self.v, self.o)

    def torch_single(self, name):
        """One untimed call of torch candidate `name` under its backend; returns its output."""
        from torch.nn.attention import sdpa_kernel
        fn, backend = self.torch_fn(name)
        ctx = sdpa_kernel(backend) if backend is not None else _null_context()
        with torch.no_grad(), ctx:
            return fn()

    def torch_block(self, name, warmup, launches):
        fn, backend = self.torch_fn(name)
        return torch_calls_block(fn, backend, warmup, launches, self.flush, self.spin_us_per_launch)

    def verify_torch(self, name):
        out = self.torch_single(name)
        torch.cuda.synchronize()
        return self.rel_error(out, self.ref)


def flush_l2(flush):
    """Evicts L2 by reading `flush` (a uint8 tensor larger than L2), as the backend's Time does."""
    torch.amax(flush.view(torch.int64))


def torch_calls_block(fn, backend, warmup, launches, flush, spin_us_per_launch):
    """Samples (µs) of `launches` calls of fn() under the SDPA `backend` (None: as it is), each
    between CUDA events, queued behind a spin kernel so the host's dispatch time is never inside
    a measured interval; `flush` (a tensor, or None) is read before each timed call (flush_l2)."""
    from torch.nn.attention import sdpa_kernel
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    ctx = sdpa_kernel(backend) if backend is not None else _null_context()
    with torch.no_grad(), ctx:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        torch.cuda._sleep(int(spin_us_per_launch * (launches + 1) * 2000))  # ~2 GHz SM clock
        for i in range(launches):
            if flush is not None:
                flush_l2(flush)
            starts[i].record()
            fn()
            stops[i].record()
        torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1000.0 for a, b in zip(starts, stops)]


class _null_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def set_tf32(enabled):
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def prepare_candidates(bench, names, fixed_configs, warmup, launches, log, config_candidates=None):
    """Verifies every candidate; for ours* picks the config (fixed, else the fastest of the list
    config_candidates[name] (default CONFIG_CANDIDATES), one block each). `bench` answers
    can_implement / verify_ours / ours_block for ours* names and verify_torch / torch_block for
    the others (ShapeBench here, the decode script's bench likewise). Returns (runnable
    candidates, all candidates for the report)."""
    config_candidates = config_candidates or CONFIG_CANDIDATES
    s = bench.shape
    tol = bench.ft.tolerance(s.precision, s.dtype)
    runnable, report = [], []
    for name in names:
        entry = {"name": name, "config": "-", "rel_err": None, "note": ""}
        report.append(entry)
        if name.startswith("ours"):
            keys = [fixed_configs[name]] if name in fixed_configs else \
                [t.format(p=s.precision) for t in config_candidates[CONFIG_OF.get(name, name)]]
            best, why = None, "no candidate config"
            for key in keys:
                cfg = bench.ft.config(key)  # a plain struct, the same for every build of this C ABI
                ok, msg = bench.can_implement(cfg, name)
                if not ok:
                    why = f"{key}: {msg}"
                    continue
                try:
                    err = bench.verify_ours(cfg, name)
                    if not err <= tol:
                        why = f"{key}: rel. error {err:.2e} over {tol:g}"
                        log(f"  {name} {key}: FAILED verification, rel. error {err:.2e}")
                        continue
                    us = statistics.median(bench.ours_block(cfg, warmup, launches, name)) if len(keys) > 1 else 0.0
                except RuntimeError as e:
                    why = f"{key}: {e}"
                    continue
                if len(keys) > 1:
                    log(f"  screen {name} {key}: {us:.1f} us, rel. error {err:.1e}")
                if best is None or us < best[1]:
                    best = (key, us, err, cfg)
            if best is None:
                entry["note"] = why[:160]
                log(f"  {name}: not runnable: {entry['note']}")
                continue
            entry.update(config=best[0], rel_err=best[2])
            cfg = best[3]
            runnable.append({"name": name,
                             "block": lambda cfg=cfg, name=name: bench.ours_block(cfg, warmup, launches, name)})
            if hasattr(bench, "ours_single"):  # one untimed call (--kernel-times finds its kernels so)
                runnable[-1]["single"] = lambda cfg=cfg, name=name: bench.ours_single(cfg, name)
        else:
            try:
                err = bench.verify_torch(name)
            except Exception as e:  # a backend that cannot run this dtype/shape
                entry["note"] = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
                log(f"  {name}: not runnable: {entry['note']}")
                continue
            entry["rel_err"] = err
            if not err <= tol:
                entry["note"] = f"rel. error {err:.2e} over {tol:g}"
                log(f"  {name}: FAILED verification ({entry['note']})")
                continue
            runnable.append({"name": name, "block": lambda name=name: bench.torch_block(name, warmup, launches)})
            if hasattr(bench, "torch_single"):
                runnable[-1]["single"] = lambda name=name: bench.torch_single(name)
        log(f"  {name}: {entry['config']} rel. error {entry['rel_err']:.1e}")
    return runnable, report


def run_rounds(shape_id, runnable, rounds, rng, reader, configs, log, kernel_times=None):
    """`rounds` rounds of one block per candidate in a fresh random order. A block's value is the
    median of its timer's samples, or with `kernel_times` (a KernelTimes; --kernel-times, which
    runs all the rounds under one profiler) of its launches' spans by CUPTI (launch_span_us), the
    timer's median kept beside them."""

    def play_round():
        order = list(runnable)
        rng.shuffle(order)
        round_state = reader.read() if not reader.per_block else None
        played = []
        for c in order:
            before = reader.read() if reader.per_block else round_state
            samples = c["block"]()
            after = reader.read() if reader.per_block else None
            played.append((c, samples, before, after))
        end_state = reader.read() if not reader.per_block else None
        return round_state, played, end_state

    blocks = []

    def record(r, round_state, played, end_state, kernel_samples):
        for pos, ((c, samples, before, after), kernel) in enumerate(zip(played, kernel_samples)):
            value = kernel if kernel is not None else samples
            blocks.append({"shape": shape_id, "round": r, "position": pos, "candidate": c["name"],
                           "config": configs.get(c["name"], "-"), "median_us": statistics.median(value),
                           "timer_median_us": statistics.median(samples) if kernel is not None else None,
                           "min_us": min(value), "max_us": max(value), "launches": len(value),
                           "sm_mhz_before": (before or {}).get("sm_mhz"), "sm_mhz_after": (after or {}).get("sm_mhz"),
                           "power_w_before": (before or {}).get("power_w"),
                           "power_w_after": (after or {}).get("power_w"),
                           "reasons_before": reasons_text((before or {}).get("reasons")),
                           "reasons_after": reasons_text((after or {}).get("reasons")),
                           "unsteady": int(state_moved(before, after)), "state_source": reader.source})
        if not reader.per_block:  # nvidia-smi: one reading at each round boundary
            moved = int(state_moved(round_state, end_state))
            for b in blocks[-len(played):]:
                b["sm_mhz_after"], b["power_w_after"] = end_state.get("sm_mhz"), end_state.get("power_w")
                b["reasons_after"] = reasons_text(end_state.get("reasons"))
                b["unsteady"] = moved
        log(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{b['candidate']} {b['median_us']:.1f}" for b in blocks[-len(played):]))

    if kernel_times is None:
        for r in range(rounds):
            round_state, played, end_state = play_round()
            record(r, round_state, played, end_state, [None] * len(played))
    else:
        all_rounds, kernel_samples = kernel_times.run(lambda: [play_round() for _ in range(rounds)], runnable)
        for r, ((round_state, played, end_state), kernels) in enumerate(zip(all_rounds, kernel_samples)):
            record(r, round_state, played, end_state, kernels)
    return blocks


# ---------------------------------------------------------------- CUPTI check

def kernel_events(trace_path):
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    out = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"]
    out.sort(key=lambda e: float(e.get("ts", 0)))
    return [(e.get("name", ""), float(e.get("ts", 0)), float(e.get("dur", 0))) for e in out]


def profiled(fn, trace_dir, tag):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    path = os.path.join(trace_dir, f"trace_{tag}.json")
    prof.export_chrome_trace(path)
    return result, kernel_events(path)


def launch_span_us(kernels):
    """Device time of one launch of several kernels ((name, start, duration) in µs): from the
    first one's start to the last one's end, so a gap between them counts and an overlap (a
    programmatic dependent launch) counts once; one kernel's duration when it is alone."""
    return max(ts + dur for _, ts, dur in kernels) - min(ts for _, ts, _ in kernels)


def per_launch_device_us(events, names, kernels_per_launch, launches):
    """Device time of each of the last `launches` launches (launch_span_us of its kernels: those
    named in `names`, `kernels_per_launch` of them per launch)."""
    mine = [e for e in events if e[0] in names]
    need = kernels_per_launch * launches
    if kernels_per_launch <= 0 or len(mine) < need:
        return None, len(mine)
    mine = mine[-need:]
    return [launch_span_us(mine[i * kernels_per_launch:(i + 1) * kernels_per_launch])
            for i in range(launches)], len(mine)


class KernelTimes:
    """--kernel-times: all the rounds of a shape run under one profiler, as the timer's rounds run
    (so the GPU stays as busy and as hot: profiling block by block left it idle between blocks,
    unthrottled where timed rounds run at the power cap), and each block is valued by the durations CUPTI
    records for its candidate's own kernels in each timed launch, spanned per launch: no timer's
    overhead enters a ratio. A candidate's kernels are those one untimed call of it launches,
    less the flush's and the spin's (`noise_names`), found before the rounds; blocks take their
    kernels' events in the rounds' order (two builds of one kernel share its name), each
    `warmup` + timed launches of them. A block whose kernels do not all come is an error."""

    def __init__(self, trace_dir, noise_names, warmup, log):
        self.trace_dir, self.noise_names, self.warmup, self.log = trace_dir, set(noise_names), warmup, log
        self.kernels = {}  # candidate -> (names, kernels per call)

    def kernels_of(self, c):
        if c["name"] not in self.kernels:
            if "single" not in c:
                raise RuntimeError(f"{c['name']}: no single call to find its kernels by")
            names, per_call = kernels_of_call(c["single"], self.noise_names, self.trace_dir, f"single_{c['name']}")
            if not per_call:
                raise RuntimeError(f"{c['name']}: CUPTI recorded no kernel of one call")
            self.kernels[c["name"]] = (names, per_call)
            self.log(f"  {c['name']}: one call = {per_call} kernel(s): {', '.join(sorted(names))[:160]}")
        return self.kernels[c["name"]]

    def run(self, play, runnable):
        """Runs play() (rounds of blocks, [(state, [(candidate, timer samples, ...)], state)]) under
        one profiler; returns its result and, per round, each block's kernel samples (µs per
        timed launch)."""
        for c in runnable:
            self.kernels_of(c)
        rounds, events = profiled(play, self.trace_dir, "rounds")
        events = sorted(events, key=lambda e: e[1])
        at, out = 0, []
        for _, played, _ in rounds:
            out.append([])
            for c, samples, *_ in played:
                names, per_call = self.kernels[c["name"]]
                need = (self.warmup + len(samples)) * per_call
                mine = []
                while at < len(events) and len(mine) < need:
                    if events[at][0] in names:
                        mine.append(events[at])
                    at += 1
                if len(mine) < need or not samples:
                    raise RuntimeError(f"{c['name']}: {len(mine)} of its {need} kernel events in a block")
                out[-1].append(per_launch_device_us(mine, names, per_call, len(samples))[0])  # the timed ones
        return rounds, out


def open_traces(args):
    """The folder for the profiler's traces (--out with --keep-traces, else a temporary one that
    close_traces removes), with CUPTI's start-up cost paid there first, outside any measurement."""
    trace_dir = args.out if args.keep_traces else tempfile.mkdtemp(prefix="cupti-")
    profiled(lambda: torch.zeros(1, device="cuda").add_(1), trace_dir, "init")
    return trace_dir


def close_traces(args, trace_dir):
    if not args.keep_traces:
        shutil.rmtree(trace_dir, ignore_errors=True)


def kernels_of_call(single, noise_names, trace_dir, tag):
    """The names of the kernels one call of single() launches (run once first, untimed) and how
    many it launches, less those in `noise_names`; (set(), 0) when CUPTI records none."""
    single()
    _, ev = profiled(single, trace_dir, tag)
    ev = [e for e in ev if e[0] not in noise_names]
    return {e[0] for e in ev}, len(ev)


def noise_kernels(flush, trace_dir, tag):
    """Names of the kernels of an L2 flush and of a spin, never counted as a measured call's."""
    _, noise = profiled(lambda: (flush_l2(flush), torch.cuda._sleep(1000)), trace_dir, tag)
    return {e[0] for e in noise}


def cupti_check(args, ft, reader, shape_ids, fixed, log, also=None, also_builds=None):
    """The timer check; `also` ({"ours+LABEL": KEY}) and `also_builds` ({"ours+LABEL": Fusetune})
    add --also configs and builds as subjects beside ours (verified as ours is, through
    prepare_candidates), so two builds' kernels are compared by CUPTI's durations as well as by
    the timer."""
    also, also_builds = also or {}, also_builds or {}
    trace_dir = open_traces(args)
    rows = []
    for shape_id in shape_ids:
        s = SHAPES[shape_id]
        log(f"== {shape_id}: {s.label}")
        set_tf32(s.precision == "tf32")
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        bench = ShapeBench(s, ft, flush, args.spin_us_per_launch)
        bench.ft_of = dict(also_builds)
        ours_names = ["ours", *also]
        runnable, report = prepare_candidates(bench, ours_names + TORCH_FUSED,
                                              shape_configs(fixed, also, shape_id, s), args.warmup, args.launches, log)
        by_name = {c["name"]: c for c in runnable}
        configs = {r["name"]: r["config"] for r in report}
        torch_name = next((n for n in TORCH_FUSED if n in by_name), None)
        n = args.cupti_launches
        subjects = []
        for name in (m for m in ours_names if m in by_name):
            lib, cfg = bench._ft(name), ft.config(configs[name])
            subjects.append((name, configs[name], lambda cfg=cfg, name=name: bench.ours_single(cfg, name),
                             lambda flush_on, lib=lib, cfg=cfg: lib.time(bench.problem, cfg, bench.q, bench.k, bench.v,
                                                                         bench.o, args.warmup, n, flush_on)))
        if torch_name:
            def torch_timer(flush_on, name=torch_name):
                saved = bench.flush
                bench.flush = flush if flush_on else None
                try:
                    return bench.torch_block(name, args.warmup, n)
                finally:
                    bench.flush = saved
            subjects.append((f"torch {torch_name}", "-", lambda name=torch_name: bench.torch_single(name), torch_timer))
        noise_names = noise_kernels(flush, trace_dir, f"{shape_id}_noise")
        for who, cfg_key, single, timer in subjects:
            names, per_call = kernels_of_call(single, noise_names, trace_dir, f"{shape_id}_{who.replace(' ', '_')}_single")
            if per_call == 0:
                log(f"  {who}: CUPTI recorded no kernel of one call (noise kernels: {sorted(noise_names)[:4]}); skipped")
                continue
            log(f"  {who}: one call = {per_call} kernel(s): {', '.join(sorted(names))[:200]}")
            for flush_on in (False, True):
                mode = "flush" if flush_on else "steady"
                before = reader.read()
                plain = timer(flush_on)
                with_prof, events = profiled(lambda: timer(flush_on), trace_dir,
                                             f"{shape_id}_{who.replace(' ', '_')}_{mode}")
                after = reader.read()
                device, matched = per_launch_device_us(events, names, per_call, len(with_prof))
                row = {"shape": shape_id, "timer_of": who, "config": cfg_key, "mode": mode,
                       "launches": len(with_prof), "timer_median_us": statistics.median(plain),
                       "timer_profiled_median_us": statistics.median(with_prof),
                       "cupti_median_us": None, "gap_pct": None, "paired_gap_median_us": None,
                       "kernels_per_launch": per_call, "kernel_events": matched,
                       "sm_mhz": f"{before.get('sm_mhz', '?')}->{after.get('sm_mhz', '?')}",
                       "reasons": reasons_text(after.get("reasons"))}
                if device:
                    cm = statistics.median(device)
                    row["cupti_median_us"] = cm
                    row["gap_pct"] = (row["timer_profiled_median_us"] / cm - 1.0) * 100.0
                    row["paired_gap_median_us"] = statistics.median(t - d for t, d in zip(with_prof, device))
                else:
                    log(f"  {who} {mode}: CUPTI recorded {matched} matching kernel events, "
                        f"{per_call * len(with_prof)} expected; kernels seen: "
                        f"{sorted({e[0] for e in events})[:6]}")
                rows.append(row)
                log(f"  {who} {mode}: timer {row['timer_median_us']:.2f} us (profiled {row['timer_profiled_median_us']:.2f}), "
                    f"CUPTI {fmt(row['cupti_median_us'], '.2f')} us, gap {fmt(row['gap_pct'], '+.2f')} %")
        del bench, flush
        torch.cuda.empty_cache()
    fields = ["shape", "timer_of", "config", "mode", "launches", "timer_median_us", "timer_profiled_median_us",
              "cupti_median_us", "gap_pct", "paired_gap_median_us", "kernels_per_launch", "kernel_events",
              "sm_mhz", "reasons"]
    with open(os.path.join(args.out, "cupti_check.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    lines = ["Timer vs CUPTI (torch.profiler, ProfilerActivity.CUDA): the same launches; gap = timer / CUPTI - 1.",
             "steady: back-to-back launches, no L2 flush; flush: a 256 MiB read before each launch.", "",
             "| shape | timer of | config | mode | launches | timer median µs | same, profiled | CUPTI median µs "
             "| gap % | median paired gap µs | kernels/launch | SM MHz | throttle |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['timer_of']} | {r['config']} | {r['mode']} | {r['launches']} | "
                     f"{r['timer_median_us']:.2f} | {r['timer_profiled_median_us']:.2f} | "
                     f"{fmt(r['cupti_median_us'], '.2f')} | {fmt(r['gap_pct'], '+.2f')} | "
                     f"{fmt(r['paired_gap_median_us'], '.2f')} | {r['kernels_per_launch']} | {r['sm_mhz']} | {r['reasons']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "cupti_check.md"), "w") as f:
        f.write(text)
    close_traces(args, trace_dir)
    return text


# ---------------------------------------------------------------- main

def parse_configs(items):
    """--config SHAPE=KEY: {shape: {candidate: key}}; the key's variant names the candidate."""
    out = {}
    for item in items:
        shape, sep, key = item.partition("=")
        if not sep or shape not in SHAPES:
            raise SystemExit(f"--config {item}: expected SHAPE=KEY with SHAPE one of {', '.join(SHAPES)}")
        variant = key.split("/", 1)[0]
        if variant not in VARIANT_OF_PREFIX:
            raise SystemExit(f"--config {item}: the key must start with fused/, partial/ or materialized/")
        out.setdefault(shape, {})[VARIANT_OF_PREFIX[variant]] = key
    return out


def fixed_configs_of(fixed, shape_id, shape):
    """The --config keys of one shape, {p} replaced by its precision (also under the names of
    CONFIG_OF that run a keyed candidate's config)."""
    out = {name: key.format(p=shape.precision) for name, key in fixed.get(shape_id, {}).items()}
    for name, of in CONFIG_OF.items():
        if of in out:
            out.setdefault(name, out[of])
    return out


def shape_configs(fixed, also, shape_id, shape):
    """The configs fixed for one shape: its --config keys and every --also key, {p} replaced by
    its precision."""
    out = fixed_configs_of(fixed, shape_id, shape)
    out.update({name: key.format(p=shape.precision) for name, key in also.items()})
    return out


def parse_also(items):
    """--also LABEL=KEY[@LIB]: ({"ours+LABEL": KEY}, {"ours+LABEL": LIB}), in the order given."""
    keys, libs = {}, {}
    for item in items:
        label, sep, key = item.partition("=")
        key, _, lib = key.partition("@")
        if not sep or not label or not key.startswith("fused/"):
            raise SystemExit(f"--also {item}: expected LABEL=KEY[@LIB] with a fused/ key")
        keys[f"ours+{label}"] = key
        if lib:
            libs[f"ours+{label}"] = lib
    return keys, libs


def parse_list(text, allowed, what):
    items = [x for x in text.split(",") if x]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise SystemExit(f"{what}: unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Shapes: " + ", ".join(SHAPES) +
                                 ", the library's seed shapes as fp32-d64-s<S> and tf32-d64-s<S>, and any fp16 or bf16 "
                                 "shape spelled out as PRECISION-dD-sS-bB-hH[-kvKV][-causal]")
    ap.add_argument("--lib", help="path to libfusetune_capi.so (required except with --self-test)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="comma-separated shape ids")
    ap.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                    help=f"comma-separated, from {', '.join(ALL_CANDIDATES)}")
    ap.add_argument("--config", action="append", default=[], metavar="SHAPE=KEY",
                    help="fix a config of ours (fused/...) or ours-materialized (materialized/...) for a shape "
                         "({p} in KEY = the shape's precision)")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=KEY[@LIB]",
                    help="another fused config of ours in every shape's rounds, as candidate ours+LABEL ({p} in "
                         "KEY = the shape's precision), run by the library LIB (another build's "
                         "libfusetune_capi.so) when given; pairs ours / ours+LABEL and ours+LABEL / cudnn")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (>= 3)")
    ap.add_argument("--launches", type=int, default=10, help="timed launches per block")
    ap.add_argument("--warmup", type=int, default=2, help="untimed launches before each block")
    ap.add_argument("--steady", action="store_true", help="no L2 flush: back-to-back launches")
    ap.add_argument("--seed", type=int, default=1, help="round order and inputs")
    ap.add_argument("--spin-us-per-launch", type=float, default=150.0,
                    help="torch blocks: GPU spin queued first, per launch, to cover the host's dispatch")
    ap.add_argument("--quick", action="store_true", help="5 rounds (a smoke run)")
    ap.add_argument("--kernel-times", action="store_true",
                    help="each block's value from CUPTI's kernel durations (a shape's rounds under one "
                         "profiler) instead of the timer's")
    ap.add_argument("--cupti-check", action="store_true", help="the timer check instead of the comparison")
    ap.add_argument("--cupti-shapes", default=",".join(DEFAULT_CUPTI_SHAPES))
    ap.add_argument("--cupti-launches", type=int, default=30)
    ap.add_argument("--keep-traces", action="store_true",
                    help="write the profiler traces of --cupti-check and --kernel-times under --out (several "
                         "files per shape: more than the 8 files a remote run may bring back)")
    ap.add_argument("--self-test", action="store_true", help="check statistics and report code; no GPU")
    return ap


def self_test(out_dir):
    # Order statistics: n = 15 gives [x_(4), x_(12)] at 96.5 %; n = 3 cannot reach 90 %.
    med, lo, hi, cover = median_ci(list(range(1, 16)))
    assert (med, lo, hi) == (8, 4, 12) and abs(cover - 0.9648) < 1e-3, (med, lo, hi, cover)
    med, lo, hi, cover = median_ci([3.0, 1.0, 2.0])
    assert (med, lo, hi) == (2.0, 1.0, 3.0) and abs(cover - 0.75) < 1e-9, (med, lo, hi, cover)
    med, lo, hi, cover = median_ci(list(range(1, 101)))
    assert (lo, hi) == (42, 59) and cover >= 0.90, (lo, hi, cover)
    assert abs(quantile([1, 2, 3, 4, 5], 0.1) - 1.4) < 1e-12
    # A launch's kernels count from the first one's start to the last one's end.
    assert launch_span_us([("a", 5.0, 3.0)]) == 3.0
    assert launch_span_us([("a", 0.0, 3.0), ("b", 4.0, 1.0)]) == 5.0  # a gap counts
    assert launch_span_us([("a", 0.0, 3.0), ("b", 2.0, 2.0)]) == 4.0  # an overlap counts once
    # --kernel-times: a block's value is its own kernels' span per timed launch, the flush's
    # kernels and the warm-up launches left out, blocks of two builds of one kernel (one name)
    # told apart by their order; missing kernels are an error.
    global profiled
    real_profiled = profiled

    def stub_profiled(fn, trace_dir, tag):
        result = fn()
        if result is None:  # one untimed call: two kernels of its own
            return result, [("attn", 0.0, 3.0), ("attn_combine", 1.0, 1.0)]
        ev, t = [], 0.0
        for _, played, _ in result:  # rounds: per block one warm-up launch, then the timed ones
            for c, samples, *_ in played:
                for sample in [5.0] + samples:
                    # A launch spans sample - 1 µs: its two kernels and the 0.5 µs between them.
                    ev += [("flush", t, 9.0), ("attn", t + 1, sample - 2.0), ("attn_combine", t + sample - 0.5, 0.5)]
                    t += 40.0
        ev.sort(key=lambda e: -e[1])  # a trace need not list them in time order
        return result, ev[getattr(fn, "lost_events", 0):]
    profiled = stub_profiled
    try:
        times = KernelTimes("/nonexistent", {"flush"}, 1, lambda *a: None)
        ours = {"name": "ours", "single": lambda: None, "block": lambda: [10.0, 12.0, 11.0]}
        base = {"name": "ours+base", "single": lambda: None, "block": lambda: [20.0, 22.0]}
        reader = type("R", (), {"per_block": True, "source": "none", "read": lambda self: {}})()
        blocks = run_rounds("s", [ours, base], 3, random.Random(0), reader, {"ours": "k"}, lambda *a: None, times)
        assert times.kernels["ours"] == ({"attn", "attn_combine"}, 2)
        assert sorted((b["candidate"], b["median_us"], b["timer_median_us"], b["launches"]) for b in blocks) == \
            [("ours", 10.0, 11.0, 3)] * 3 + [("ours+base", 20.0, 21.0, 2)] * 3, blocks

        def lossy_rounds():
            return [(None, [(ours, [10.0, 12.0, 11.0], None, None)], None)]
        lossy_rounds.lost_events = 2  # the last launch's kernels (the list is newest first)
        try:
            times.run(lossy_rounds, [ours])
            raise AssertionError("a block without its kernels must fail")
        except RuntimeError as e:
            assert "kernel events" in str(e), e
    finally:
        profiled = real_profiled
    # Spelled-out shape ids; a named id keeps its own shape.
    gqa = shape_of_id("bf16-d128-s4096-b2-h32-kv8-causal")
    assert (gqa.batch, gqa.heads, gqa.kv(), gqa.seq, gqa.head_dim, gqa.causal, gqa.dtype) == (2, 32, 8, 4096, 128, True, BF16)
    assert gqa.label == SHAPES["bf16-d128-s4096-gqa-causal"].label, gqa.label
    assert shape_of_id("fp16-d128-s512-b16-h16") == Shape("fp16 b16 h16 d128 S=512", 16, 16, 512, 128, False, FP16, "fp16")
    assert shape_of_id("fp16-d128-s512") is None and shape_of_id("fp16-d128-s0-b1-h1") is None
    assert shape_of_id("bf16-d128-s64-b1-h6-kv4") is None and shape_of_id("fp32-d64-s64-b1-h1") is None
    add_spelled_shapes("fp16-d64-s2048,fp16-d128-s256-b32-h16,nonsense")
    assert "fp16-d128-s256-b32-h16" in SHAPES and "nonsense" not in SHAPES
    del SHAPES["fp16-d128-s256-b32-h16"]
    assert state_moved({"sm_mhz": 1980, "reasons": 0}, {"sm_mhz": 1700, "reasons": 0})
    assert state_moved({"sm_mhz": 1980, "reasons": 0}, {"sm_mhz": 1980, "reasons": 4})
    assert not state_moved({"sm_mhz": 1980, "reasons": 4}, {"sm_mhz": 1970, "reasons": 4})
    assert not state_moved({}, {"sm_mhz": 1980})
    assert reasons_text(0x4 | 0x40) == "sw_power_cap+hw_thermal" and reasons_text(0) == "none"
    # --config keys name the shape's precision with {p}, as --also keys do.
    fixed = parse_configs(["bf16-d128-s4096=fused/bm128/bs128/t384/{p}/st2/persistent",
                           "fp16-d128-s1024-b8=materialized/bm64/bs64/t128/fp16/st1"])
    assert fixed_configs_of(fixed, "bf16-d128-s4096", SHAPES["bf16-d128-s4096"]) == {
        "ours": "fused/bm128/bs128/t384/bf16/st2/persistent",
        "ours-queued": "fused/bm128/bs128/t384/bf16/st2/persistent"}, fixed  # ours-queued runs ours' key
    assert fixed_configs_of(fixed, "fp16-d128-s1024-b8", SHAPES["fp16-d128-s1024-b8"]) == {
        "ours-materialized": "materialized/bm64/bs64/t128/fp16/st1"}, fixed
    assert fixed_configs_of(fixed, "fp16-d64-s2048", SHAPES["fp16-d64-s2048"]) == {}
    also, _ = parse_also(["base=fused/bm128/bs128/t384/{p}/st2/persistent@/x/lib.so"])
    assert shape_configs(fixed, also, "fp16-d64-s2048", SHAPES["fp16-d64-s2048"]) == {
        "ours+base": "fused/bm128/bs128/t384/fp16/st2/persistent"}
    assert shape_configs(fixed, also, "bf16-d128-s4096", SHAPES["bf16-d128-s4096"]) == {
        "ours": "fused/bm128/bs128/t384/bf16/st2/persistent", "ours-queued": "fused/bm128/bs128/t384/bf16/st2/persistent",
        "ours+base": "fused/bm128/bs128/t384/bf16/st2/persistent"}
    # Synthetic rounds: ours 0.9x cudnn in every round with noise, level with flash.
    rng = random.Random(7)
    blocks = []
    for r in range(15):
        drift = 1.0 + 0.1 * math.sin(r)  # power-capped clock moving between rounds
        for name, base in (("ours", 90.0), ("cudnn", 100.0), ("flash", 90.0)):
            blocks.append({"shape": "s", "round": r, "candidate": name,
                           "median_us": base * drift * (1 + rng.uniform(-0.01, 0.01)), "unsteady": r == 3})
    cands = {"s": [{"name": "ours", "config": "fused/x"}, {"name": "cudnn"}, {"name": "flash"},
                   {"name": "efficient", "note": "not runnable"}]}
    cand_rows, pair_rows = summarize(blocks, cands, {"s": 1e9})
    pairs = {p["pair"]: p for p in pair_rows}
    assert pairs["ours / cudnn"]["verdict"] == "ours faster", pairs
    assert 0.88 < pairs["ours / cudnn"]["median_ratio"] < 0.92
    assert pairs["ours / flash"]["ci_low"] < 1 < pairs["ours / flash"]["ci_high"], pairs["ours / flash"]
    assert [r["unsteady_blocks"] for r in cand_rows] == [1, 1, 1, 0]
    text = write_report(out_dir, "self-test", blocks, cand_rows, pair_rows, "none", state_ranges_of(blocks))
    assert "ours / cudnn" in text and os.path.exists(os.path.join(out_dir, "compare.csv"))
    print(text)
    print("self-test passed")
    return 0


def log(msg):
    print(msg, flush=True)


def start_session(args, fusetune_class):
    """What every comparison starts with (args: --out, --seed, --lib): the output folder, the
    seeded generator, CUDA, ours (`fusetune_class(args.lib)`) and the device-state reader.
    Returns (ours, reader, device line), the line printed."""
    os.makedirs(args.out, exist_ok=True)
    warnings.filterwarnings("ignore")  # sdpa_kernel explains every backend it skips
    torch.manual_seed(args.seed)
    torch.cuda.init()
    ft = fusetune_class(args.lib)
    reader = DeviceStateReader(torch.cuda.current_device())
    # cuDNN is the anchor of most comparisons and its kernels change between releases (its causal
    # prefill did), so every report names the version torch runs.
    device_text = f"{torch.cuda.get_device_name()}, torch {torch.__version__}, " \
                  f"cuDNN {torch.backends.cudnn.version()}, ours: {ft.describe()}, device state from {reader.source}"
    log(device_text)
    return ft, reader, device_text


def main():
    args = build_parser().parse_args()
    if args.self_test:
        os.makedirs(args.out, exist_ok=True)
        return self_test(args.out)
    if not args.lib:
        raise SystemExit("--lib is required (path to libfusetune_capi.so)")
    SHAPES.update(seed_shapes(args.lib))
    add_spelled_shapes(args.cupti_shapes if args.cupti_check else args.shapes)
    add_spelled_shapes(",".join(item.partition("=")[0] for item in args.config))
    shape_ids = parse_list(args.cupti_shapes if args.cupti_check else args.shapes, list(SHAPES), "--shapes")
    names = parse_list(args.candidates, ALL_CANDIDATES, "--candidates")
    fixed = parse_configs(args.config)
    also, also_libs = parse_also(args.also)
    rounds = 5 if args.quick else args.rounds
    if rounds < 3 or args.launches < 1 or args.warmup < 0 or args.cupti_launches < 1:
        raise SystemExit("--rounds must be >= 3, --launches and --cupti-launches >= 1, --warmup >= 0")
    if torch is None:
        raise SystemExit("this needs PyTorch with CUDA")
    if "ours" not in names:
        names.insert(0, "ours")
    ft, reader, device_text = start_session(args, Fusetune)
    # Another build's kernels run in the same rounds through its own library (dlopen'ed locally,
    # so both builds' symbols coexist).
    other_builds = {path: Fusetune(path) for path in sorted(set(also_libs.values()))}
    for path, other in other_builds.items():
        log(f"also: {path}: {other.describe()}")
    t_start = time.time()
    if args.cupti_check:
        text = cupti_check(args, ft, reader, shape_ids, fixed, log, also,
                           {name: other_builds[path] for name, path in also_libs.items()})
        log(f"==== timer check ({time.time() - t_start:.0f} s)")
        print(text)
        return 0

    flush = None if args.steady else torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rng = random.Random(args.seed)
    all_blocks, report_by_shape, flops_by_shape = [], {}, {}
    trace_dir = None
    if args.kernel_times:
        trace_dir = open_traces(args)
        noise = noise_kernels(flush if flush is not None else torch.empty(1 << 20, dtype=torch.uint8, device="cuda"),
                              trace_dir, "noise")
    for shape_id in shape_ids:
        s = SHAPES[shape_id]
        t0 = time.time()
        log(f"== {shape_id}: {s.label}")
        set_tf32(s.precision == "tf32")
        bench = ShapeBench(s, ft, flush, args.spin_us_per_launch)
        bench.ft_of = {name: other_builds[path] for name, path in also_libs.items()}
        runnable, report = prepare_candidates(bench, names + list(also), shape_configs(fixed, also, shape_id, s),
                                              args.warmup, args.launches, log)
        configs = {r["name"]: r["config"] for r in report}
        kernel_times = KernelTimes(trace_dir, noise, args.warmup, log) if args.kernel_times else None
        all_blocks += run_rounds(shape_id, runnable, rounds, rng, reader, configs, log, kernel_times)
        report_by_shape[shape_id] = report
        flops_by_shape[shape_id] = s.flops()
        set_tf32(False)
        del bench
        torch.cuda.empty_cache()
        log(f"  {shape_id}: {time.time() - t0:.1f} s")
    cand_rows, pair_rows = summarize(all_blocks, report_by_shape, flops_by_shape)
    mode = (f"{rounds} rounds, fresh random order each; per block {args.warmup} warm-up + {args.launches} timed "
            f"launches, block value = median " +
            ("of CUPTI's kernel durations (--kernel-times; the timer's median in compare.csv); " if args.kernel_times
             else "of the timer's samples; ") +
            ("steady (no L2 flush)" if args.steady else "256 MiB L2 flush before every timed launch"))
    text = write_report(args.out, mode, all_blocks, cand_rows, pair_rows, device_text, state_ranges_of(all_blocks))
    if trace_dir is not None:
        close_traces(args, trace_dir)
    log(f"==== comparison ({time.time() - t_start:.0f} s); wrote {args.out}/compare.csv and compare.md")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
