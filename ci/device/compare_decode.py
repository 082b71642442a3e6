#!/usr/bin/env python3
"""Decode attention against a KV cache: ours (contiguous and paged) vs PyTorch SDPA, interleaved on one GPU.

For each shape (new query tokens per sequence against a cache of `cache` keys; GQA) the candidates are
  ours               fusetune_run_kv_cache / fusetune_time_kv_cache through libfusetune_capi.so + ctypes on
                     the data_ptr()s of torch tensors: Q [b*new][hq][d], K and V [b*cache][hkv][d];
                     the config given with --config SHAPE=KEY, else the fastest of a short candidate
                     list (one block each, measured first);
  ours-paged<P>      the same values in a paged pool, pages of P tokens (--pages, default 16 and 1)
                     shuffled by a seeded permutation, the block table a device int32 tensor; the
                     prefix-cache shape maps the shared prefix of every sequence to the same pages;
  cudnn, flash, efficient (and math with --candidates): scaled_dot_product_attention with the backend
                     forced through torch.nn.attention.sdpa_kernel, query (b, hq, new, d) against the
                     contiguous cache (b, hkv, cache, d) with enable_gqa=True (--expand-heads: K/V
                     repeated to hq heads instead, for a torch without enable_gqa; those kernels then
                     read hq/hkv times the bytes); more than one new token: a bottom-right causal mask
                     (torch.nn.attention.bias.causal_lower_right).
  ours-e4m3          (--e4m3) the same cache quantised to FP8 e4m3 with one scale per KV head
                     (amax / 448, as serving engines do), through fusetune_*_kv_quant: verified against
                     the float64 reference of the quantised values (its error against the unquantised
                     reference is logged beside); it reads half the bytes, so ours / ours-e4m3 is the
                     speedup in tokens per second and TB/s columns count the bf16 bytes for it too;
  read               the read ceiling of the same bytes: torch.amax over K and over V (int64 views),
                     two reductions that read the cache once and compute no attention; ours / read
                     is how far a candidate is from only reading its inputs.
Every candidate's output is checked first against a float64 reference computed on the GPU one
sequence at a time; one that fails or cannot run is left out of the timing and listed with the reason.

Timing, statistics, device state and reports are compare_torch.py's (imported from beside this
file): R rounds (--rounds, default 15), each a fresh random order of the candidates, one block per
candidate per round (--warmup untimed, then --launches launches each between CUDA events, block value
= median), a 256 MiB L2 flush (a read) before every timed launch unless --steady; SM clock, power and throttle
reasons per block (NVML, else nvidia-smi per round; a block whose clock moved by more than 2 % or
whose throttle reasons changed counts as unsteady). Reported per candidate: the median block time and
the bandwidth = bytes of K and V read (every visible key of every sequence once per KV head,
AttentionProblem::KVBytesRead) / time in TB/s; per pair (ours / X, also ours / ours-paged<P>) the
median per-round ratio with its 90 % order-statistic interval. Writes compare.csv and compare.md
under --out.

Shapes (the decode preset of `fusetune --preset decode`): batch 16, 32 query heads, 8 KV heads,
head_dim 128, bf16 at cache 1k, 8k and 32k; batch 1 at 64k; and prefill of 512 new tokens over an
8k prefix shared by every sequence (its paged candidates share the prefix pages). Also: batch 1 at
128k; batch 64 at 4k with 1, 4 and 16 new tokens (speculative decoding).
"""
import argparse
import ctypes
import math
import os
import random
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402

torch = ct.torch


@dataclass(frozen=True)
class DecodeShape:
    label: str
    batch: int
    q_heads: int
    kv_heads: int
    new: int            # query tokens per sequence (1..16 for decode; more for a prefill over a cache)
    cache: int          # keys per sequence, the new tokens' own included
    head_dim: int
    dtype: int
    precision: str
    prefix: int = 0     # leading keys every sequence shares (prefix caching): the same values and pages

    @property
    def decode(self):
        return self.new <= 16

    def kv_bytes(self):
        return 2.0 * self.batch * self.cache * self.kv_heads * self.head_dim * (4 if self.dtype == ct.FP32 else 2)


def _serving(label, batch, cache, new=1, prefix=0):
    return DecodeShape(label, batch, 32, 8, new, cache, 128, ct.BF16, "bf16", prefix)


SHAPES = {
    "b16-c1k": _serving("bf16 b16 hq32 hkv8 d128 cache 1k", 16, 1024),
    "b16-c8k": _serving("bf16 b16 hq32 hkv8 d128 cache 8k", 16, 8192),
    "b16-c32k": _serving("bf16 b16 hq32 hkv8 d128 cache 32k", 16, 32768),
    "b1-c64k": _serving("bf16 b1 hq32 hkv8 d128 cache 64k", 1, 65536),
    "b1-c128k": _serving("bf16 b1 hq32 hkv8 d128 cache 128k", 1, 131072),
    "b64-c4k-n1": _serving("bf16 b64 hq32 hkv8 d128 cache 4k, 1 new token", 64, 4096, 1),
    "b64-c4k-n4": _serving("bf16 b64 hq32 hkv8 d128 cache 4k, 4 new tokens (speculative)", 64, 4096, 4),
    "b64-c4k-n16": _serving("bf16 b64 hq32 hkv8 d128 cache 4k, 16 new tokens (speculative)", 64, 4096, 16),
    "prefix-n512-c8k": _serving("bf16 b16 hq32 hkv8 d128 512 new over an 8k shared prefix", 16, 8192 + 512, 512, 8192),
}
DEFAULT_SHAPES = ["b16-c1k", "b16-c8k", "b16-c32k", "b1-c64k", "prefix-n512-c8k"]
TORCH_CANDIDATES = ["cudnn", "flash", "efficient", "math", "read"]
DEFAULT_TORCH = ["cudnn", "flash", "efficient", "read"]
# ours-e4m3's list: e4m3 K/V compute in fp16 whatever Q's type; its tiles are half the bytes, so
# block_s 256 fits.
E4M3_CONFIGS = ["fused/bm16/bs128/t256/fp16/st3", "fused/bm16/bs128/t256/fp16/st3/skauto",
                "fused/bm16/bs256/t256/fp16/st2", "fused/bm16/bs256/t256/fp16/st3",
                "fused/bm16/bs256/t256/fp16/st2/skauto", "fused/bm16/bs64/t128/fp16/st4",
                "fused/bm16/bs64/t128/fp16/st3/skauto", "fused/bm16/bs64/t128/fp16/st3/sk16",
                "fused/bm16/bs128/t256/fp16/st2/sk16", "fused/bm16/bs128/t256/fp16/st3/sk2",
                "fused/bm16/bs256/t256/fp16/st3/sk16", "fused/bm64/bs64/t128/fp16/st2"]
# The short list each ours* candidate takes its fastest from (one block each), keys as
# KernelConfig::Key prints them, precision filled in: the decode family (block_m 16: a KV
# group's heads x the new tokens per block; split planned at launch or fixed) and, for the
# prefill over a cache, its block_m 64 instances and the Hopper prefill kernel (which serves the
# contiguous cache). Configs a candidate's problem cannot run are skipped.
OURS_CONFIGS = ["fused/bm16/bs128/t256/{p}/st3/skauto", "fused/bm16/bs128/t256/{p}/st3",
                "fused/bm16/bs64/t128/{p}/st3/skauto", "fused/bm16/bs64/t128/{p}/st2/sk8",
                "fused/bm16/bs64/t128/{p}/st4", "fused/bm16/bs64/t128/{p}/st3/sk16",
                "fused/bm64/bs64/t128/{p}/st2", "fused/bm64/bs64/t128/{p}/st2/skauto",
                "fused/bm128/bs128/t384/{p}/st2"]


class KvCache(ctypes.Structure):
    _fields_ = [("decode", ctypes.c_int32), ("page_block_size", ctypes.c_int32), ("pool_pages", ctypes.c_int32),
                ("block_table_width", ctypes.c_int32), ("shared_prefix_pages", ctypes.c_int32),
                ("block_table", ctypes.c_void_p)]


class KvQuant(ctypes.Structure):
    _fields_ = [("storage", ctypes.c_int32), ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p)]


KV_E4M3 = 1


class FusetuneKvCache(ct.Fusetune):
    """compare_torch's Fusetune with the *_kv_cache and *_kv_quant calls of the C ABI."""

    def __init__(self, path):
        super().__init__(path)
        L = self.lib
        P, C, K = ctypes.POINTER(ct.Problem), ctypes.POINTER(ct.Config), ctypes.POINTER(KvCache)
        L.fusetune_can_implement_kv_cache.argtypes = [ctypes.c_void_p, P, K, C, ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_run_kv_cache.argtypes = [ctypes.c_void_p, P, K, C] + [ctypes.c_void_p] * 4 + \
            [ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_time_kv_cache.argtypes = [ctypes.c_void_p, P, K, C] + [ctypes.c_void_p] * 4 + \
            [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
             ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
             ctypes.c_size_t]

        Q = ctypes.POINTER(KvQuant)
        L.fusetune_can_implement_kv_quant.argtypes = [ctypes.c_void_p, P, K, Q, C, ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_run_kv_quant.argtypes = [ctypes.c_void_p, P, K, Q, C] + [ctypes.c_void_p] * 4 + \
            [ctypes.c_char_p, ctypes.c_size_t]
        L.fusetune_time_kv_quant.argtypes = [ctypes.c_void_p, P, K, Q, C] + [ctypes.c_void_p] * 4 + \
            [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
             ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
             ctypes.c_size_t]

    def can_implement_kv_quant(self, problem, cache, quant, config):
        rc = self.lib.fusetune_can_implement_kv_quant(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                                      ctypes.byref(quant), ctypes.byref(config), self.err,
                                                      len(self.err))
        return rc == 0, self.err.value.decode()

    def run_kv_quant(self, problem, cache, quant, config, q, k, v, o):
        rc = self.lib.fusetune_run_kv_quant(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                            ctypes.byref(quant), ctypes.byref(config), q.data_ptr(), k.data_ptr(),
                                            v.data_ptr(), o.data_ptr(), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_run_kv_quant", rc)

    def time_kv_quant(self, problem, cache, quant, config, q, k, v, o, warmup, repeats, flush_l2):
        median = ctypes.c_double()
        samples = (ctypes.c_double * repeats)()
        count = ctypes.c_int()
        rc = self.lib.fusetune_time_kv_quant(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                             ctypes.byref(quant), ctypes.byref(config), q.data_ptr(), k.data_ptr(),
                                             v.data_ptr(), o.data_ptr(), warmup, repeats, 1e6,
                                             1 if flush_l2 else 0, ctypes.byref(median), samples, repeats,
                                             ctypes.byref(count), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_time_kv_quant", rc)
        return list(samples[:count.value])

    def can_implement_kv_cache(self, problem, cache, config):
        rc = self.lib.fusetune_can_implement_kv_cache(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                                      ctypes.byref(config), self.err, len(self.err))
        return rc == 0, self.err.value.decode()

    def run_kv_cache(self, problem, cache, config, q, k, v, o):
        rc = self.lib.fusetune_run_kv_cache(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                            ctypes.byref(config), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                            o.data_ptr(), self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_run_kv_cache", rc)

    def time_kv_cache(self, problem, cache, config, q, k, v, o, warmup, repeats, flush_l2):
        """Samples (µs) of `repeats` launches, each timed alone; no early stop."""
        median = ctypes.c_double()
        samples = (ctypes.c_double * repeats)()
        count = ctypes.c_int()
        rc = self.lib.fusetune_time_kv_cache(self.handle, ctypes.byref(problem), ctypes.byref(cache),
                                             ctypes.byref(config), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                             o.data_ptr(), warmup, repeats, 1e6, 1 if flush_l2 else 0,
                                             ctypes.byref(median), samples, repeats, ctypes.byref(count),
                                             self.err, len(self.err))
        if rc != 0:
            self._fail("fusetune_time_kv_cache", rc)
        return list(samples[:count.value])


def paged_pools(k, v, page, prefix_pages, generator):
    """k, v: (b, cache, hkv, d) contiguous values. Returns (K pool, V pool, table): pools of
    (pages, page, hkv, d), the block table (b, width) int32 on the same device; every sequence's
    pages shuffled over the pool, its first `prefix_pages` logical pages the same physical pages in
    every sequence (their values must be equal across sequences)."""
    b, n, h, d = k.shape
    width = (n + page - 1) // page
    own = width - prefix_pages
    pool_pages = prefix_pages + b * own
    perm = torch.randperm(pool_pages, generator=generator).to(torch.int32)
    table = torch.empty(b, width, dtype=torch.int32)
    table[:, :prefix_pages] = perm[:prefix_pages]
    table[:, prefix_pages:] = perm[prefix_pages:].view(b, own)
    table = table.to(k.device).contiguous()
    rows = table.reshape(-1).long()
    pools = []
    for x in (k, v):
        padded = torch.zeros(b, width * page, h, d, dtype=x.dtype, device=x.device)
        padded[:, :n] = x
        pool = torch.empty(pool_pages, page, h, d, dtype=x.dtype, device=x.device)
        pool[rows] = padded.view(b * width, page, h, d)
        # Read back through the table as a kernel does: the pool must hold every key where the table says.
        if not torch.equal(pool[rows].view(b, width * page, h, d)[:, :n], x):
            raise RuntimeError(f"page {page}: the pool does not read back through its block table")
        pools.append(pool)
    return pools[0], pools[1], table


class DecodeBench:
    """Inputs, the fp64 reference and the candidates of one shape, with the hooks
    compare_torch.prepare_candidates calls."""

    def __init__(self, shape, ft, flush, spin_us_per_launch, pages, expand_heads, seed, e4m3=False):
        s = shape
        self.shape, self.ft, self.flush, self.spin_us_per_launch = s, ft, flush, spin_us_per_launch
        tdt = getattr(torch, ct.TORCH_DTYPE_NAME[s.dtype])
        b, hq, hkv, n, m, d = s.batch, s.q_heads, s.kv_heads, s.new, s.cache, s.head_dim
        self.q = (torch.rand(b, n, hq, d, device="cuda") * 2 - 1).to(tdt)
        self.k = (torch.rand(b, m, hkv, d, device="cuda") * 2 - 1).to(tdt)
        self.v = (torch.rand(b, m, hkv, d, device="cuda") * 2 - 1).to(tdt)
        if s.prefix:
            self.k[:, :s.prefix] = self.k[:1, :s.prefix].clone()
            self.v[:, :s.prefix] = self.v[:1, :s.prefix].clone()
        self.o = torch.empty_like(self.q)
        # torch: (b, h, tokens, d) contiguous copies of the same values.
        self.qt = self.q.transpose(1, 2).contiguous()
        self.kt = self.k.transpose(1, 2).contiguous()
        self.vt = self.v.transpose(1, 2).contiguous()
        self.expand_heads = expand_heads
        if expand_heads:
            self.kt = self.kt.repeat_interleave(hq // hkv, dim=1)
            self.vt = self.vt.repeat_interleave(hq // hkv, dim=1)
        self.mask = None
        if n > 1:
            from torch.nn.attention.bias import causal_lower_right
            self.mask = causal_lower_right(n, m)
        self.ref = self._reference(self.k, self.v)  # (b, new, hq, d), ours' layout
        self.quant = {}
        if e4m3:
            # One scale per KV head over the whole cache (amax / 448), values clamped to the format.
            def quantize(x):
                scale = (x.float().abs().amax(dim=(0, 1, 3)) / 448.0).clamp(min=1e-30)
                x8 = (x.float() / scale[None, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
                return x8.contiguous(), scale.contiguous()
            self.k8, self.k_scale = quantize(self.k)
            self.v8, self.v_scale = quantize(self.v)
            kq = self.k8.double() * self.k_scale.double()[None, None, :, None]
            vq = self.v8.double() * self.v_scale.double()[None, None, :, None]
            self.ref_e4m3 = self._reference(kq, vq)
            self.quant["ours-e4m3"] = KvQuant(KV_E4M3, self.k_scale.data_ptr(), self.v_scale.data_ptr())
        self.problem = ct.Problem(b, hq, hkv, n, m, d, 1, s.dtype, 0.0, None, None, None)
        self.caches = {"ours": (KvCache(1 if s.decode else 0, 0, 0, 0, 0, None), self.k, self.v, None)}
        generator = torch.Generator().manual_seed(seed)
        for page in pages:
            prefix_pages = s.prefix // page
            pk, pv, table = paged_pools(self.k, self.v, page, prefix_pages, generator)
            cache = KvCache(1 if s.decode else 0, page, pk.shape[0], table.shape[1], prefix_pages, table.data_ptr())
            self.caches[f"ours-paged{page}"] = (cache, pk, pv, table)
        if e4m3:
            self.caches["ours-e4m3"] = (KvCache(1 if s.decode else 0, 0, 0, 0, 0, None), self.k8, self.v8, None)

    def _reference(self, kt, vt):
        """Per sequence in float64: the query heads of a KV group against that group's keys."""
        s = self.shape
        g = s.q_heads // s.kv_heads
        out = torch.empty(s.batch, s.new, s.q_heads, s.head_dim, dtype=torch.float64, device=self.q.device)
        keep = None
        if s.new > 1:
            i = torch.arange(s.new, device="cuda").unsqueeze(1)
            j = torch.arange(s.cache, device="cuda").unsqueeze(0)
            keep = j <= i + (s.cache - s.new)  # bottom-right aligned causal
        scale = 1.0 / math.sqrt(s.head_dim)
        with torch.no_grad():
            for b in range(s.batch):
                q = self.q[b].double().view(s.new, s.kv_heads, g, s.head_dim).permute(1, 2, 0, 3)
                q = q.reshape(s.kv_heads, g * s.new, s.head_dim)        # (hkv, g*new, d)
                k = kt[b].double().permute(1, 2, 0)                      # (hkv, d, cache)
                v = vt[b].double().permute(1, 0, 2)                      # (hkv, cache, d)
                sc = torch.matmul(q, k) * scale                          # (hkv, g*new, cache)
                if keep is not None:
                    sc = sc.view(s.kv_heads, g, s.new, s.cache).masked_fill(~keep, float("-inf"))
                    sc = sc.view(s.kv_heads, g * s.new, s.cache)
                o = torch.matmul(torch.softmax(sc, dim=-1), v)           # (hkv, g*new, d)
                out[b] = o.view(s.kv_heads, g, s.new, s.head_dim).permute(2, 0, 1, 3).reshape(
                    s.new, s.q_heads, s.head_dim)
        return out

    def rel_error(self, out, ref):
        out = out.double()
        if not torch.isfinite(out).all():
            return float("nan")
        return ((out - ref).abs().max() / ref.abs().max()).item()

    # ours* candidates: each name is one cache (contiguous or paged)
    def can_implement(self, cfg, name):
        if name not in self.caches:
            return False, f"no cache for {name}"
        if name in self.quant:
            return self.ft.can_implement_kv_quant(self.problem, self.caches[name][0], self.quant[name], cfg)
        return self.ft.can_implement_kv_cache(self.problem, self.caches[name][0], cfg)

    def verify_ours(self, cfg, name):
        cache, k, v, _ = self.caches[name]
        o = torch.full_like(self.q, float("nan"))
        if name in self.quant:
            self.ft.run_kv_quant(self.problem, cache, self.quant[name], cfg, self.q, k, v, o)
            ct.log(f"    {name} {cfg_key(cfg)}: rel. error {self.rel_error(o, self.ref_e4m3):.2e} against the "
                   f"quantised values' reference, {self.rel_error(o, self.ref):.2e} against the unquantised one")
            return self.rel_error(o, self.ref_e4m3)
        self.ft.run_kv_cache(self.problem, cache, cfg, self.q, k, v, o)
        return self.rel_error(o, self.ref)

    def ours_block(self, cfg, warmup, launches, name):
        cache, k, v, _ = self.caches[name]
        if name in self.quant:
            return self.ft.time_kv_quant(self.problem, cache, self.quant[name], cfg, self.q, k, v, self.o, warmup,
                                         launches, self.flush is not None)
        return self.ft.time_kv_cache(self.problem, cache, cfg, self.q, k, v, self.o, warmup, launches,
                                     self.flush is not None)

    # torch candidates: SDPA on the contiguous cache
    def _sdpa(self, name):
        from torch.nn.attention import SDPBackend
        backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]
        kwargs = {} if self.expand_heads else {"enable_gqa": True}
        if self.mask is not None:
            kwargs["attn_mask"] = self.mask

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(self.qt, self.kt, self.vt, **kwargs)
        return sdpa, backend

    def torch_block(self, name, warmup, launches):
        if name == "read":  # the read ceiling: one reduction over K and one over V, nothing else
            k64, v64 = self.k.view(torch.int64), self.v.view(torch.int64)
            return ct.torch_calls_block(lambda: (torch.amax(k64), torch.amax(v64)), None, warmup, launches,
                                        self.flush, self.spin_us_per_launch)
        fn, backend = self._sdpa(name)
        return ct.torch_calls_block(fn, backend, warmup, launches, self.flush, self.spin_us_per_launch)

    def verify_torch(self, name):
        if name == "read":
            return 0.0  # computes no attention: nothing to check
        from torch.nn.attention import sdpa_kernel
        fn, backend = self._sdpa(name)
        with torch.no_grad(), sdpa_kernel(backend):
            out = fn()  # (b, hq, new, d)
        torch.cuda.synchronize()
        return self.rel_error(out.transpose(1, 2), self.ref)


def cfg_key(cfg):
    return "/".join(str(getattr(cfg, f)) for f, _ in cfg._fields_)


def paged_pairs(pair_rows, blocks, shape_ids):
    """ours / ours-paged<P> per round (the paged targets are relative to contiguous)."""
    out = []
    for shape in shape_ids:
        per = {}
        for b in blocks:
            if b["shape"] == shape and b["candidate"].startswith("ours"):
                per.setdefault(b["candidate"], {})[b["round"]] = b["median_us"]
        base = per.get("ours", {})
        for name, rounds in per.items():
            if not name.startswith("ours-paged"):
                continue
            common = sorted(set(base) & set(rounds))
            ratios = [rounds[r] / base[r] for r in common if base[r] > 0]
            med, low, high, cover = ct.median_ci(ratios)
            if med is None:
                continue
            out.append({"shape": shape, "pair": f"{name} / ours", "rounds": len(ratios), "median_ratio": med,
                        "ci_low": low, "ci_high": high, "coverage": cover,
                        "verdict": f"paged {100 * (med - 1):+.1f} % vs contiguous"})
    return pair_rows + out


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Shapes: " + ", ".join(SHAPES))
    ap.add_argument("--lib", required=True, help="path to libfusetune_capi.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="comma-separated shape ids")
    ap.add_argument("--torch", default=",".join(DEFAULT_TORCH), help=f"SDPA backends, from {', '.join(TORCH_CANDIDATES)}")
    ap.add_argument("--pages", default="16,1", help="page sizes of the paged candidates (empty: none)")
    ap.add_argument("--config", action="append", default=[], metavar="SHAPE=KEY",
                    help="fix our config for a shape (every ours* candidate of it)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (>= 3)")
    ap.add_argument("--launches", type=int, default=10, help="timed launches per block")
    ap.add_argument("--warmup", type=int, default=2, help="untimed launches before each block")
    ap.add_argument("--steady", action="store_true", help="no L2 flush: back-to-back launches")
    ap.add_argument("--expand-heads", action="store_true",
                    help="torch: K/V repeated to the query heads instead of enable_gqa")
    ap.add_argument("--seed", type=int, default=1, help="round order, inputs and block tables")
    ap.add_argument("--spin-us-per-launch", type=float, default=150.0,
                    help="torch blocks: GPU spin queued first, per launch, to cover the host's dispatch")
    ap.add_argument("--quick", action="store_true", help="5 rounds (a smoke run)")
    ap.add_argument("--e4m3", action="store_true", help="add ours-e4m3: the cache quantised to FP8 e4m3")
    return ap


def main():
    args = build_parser().parse_args()
    shape_ids = ct.parse_list(args.shapes, list(SHAPES), "--shapes")
    torch_names = ct.parse_list(args.torch, TORCH_CANDIDATES, "--torch")
    try:
        pages = [int(x) for x in args.pages.split(",") if x]
    except ValueError:
        raise SystemExit(f"--pages {args.pages}: expected comma-separated page sizes")
    if any(p < 1 or p > 256 for p in pages):
        raise SystemExit("--pages: page sizes are 1..256")
    fixed = {}
    for item in args.config:
        shape, sep, key = item.partition("=")
        if not sep or shape not in SHAPES:
            raise SystemExit(f"--config {item}: expected SHAPE=KEY with SHAPE one of {', '.join(SHAPES)}")
        fixed[shape] = key
    rounds = 5 if args.quick else args.rounds
    if rounds < 3 or args.launches < 1 or args.warmup < 0:
        raise SystemExit("--rounds must be >= 3, --launches >= 1, --warmup >= 0")
    if torch is None:
        raise SystemExit("this needs PyTorch with CUDA")
    ft, reader, device_text = ct.start_session(args, FusetuneKvCache)
    log = ct.log
    t_start = time.time()
    flush = None if args.steady else torch.empty(ct.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rng = random.Random(args.seed)
    ours_names = ["ours"] + [f"ours-paged{p}" for p in pages] + (["ours-e4m3"] if args.e4m3 else [])
    names = ours_names + torch_names
    configs = {name: (E4M3_CONFIGS if name == "ours-e4m3" else OURS_CONFIGS) for name in ours_names}
    all_blocks, report_by_shape, bytes_by_shape = [], {}, {}
    for shape_id in shape_ids:
        s = SHAPES[shape_id]
        t0 = time.time()
        log(f"== {shape_id}: {s.label}")
        bench = DecodeBench(s, ft, flush, args.spin_us_per_launch, pages, args.expand_heads, args.seed, args.e4m3)
        fixed_here = {name: fixed[shape_id] for name in ours_names} if shape_id in fixed else {}
        runnable, report = ct.prepare_candidates(bench, names, fixed_here, args.warmup, args.launches, log,
                                                 config_candidates=configs)
        chosen = {r["name"]: r["config"] for r in report}
        all_blocks += ct.run_rounds(shape_id, runnable, rounds, rng, reader, chosen, log)
        report_by_shape[shape_id] = report
        bytes_by_shape[shape_id] = s.kv_bytes()
        del bench
        torch.cuda.empty_cache()
        log(f"  {shape_id}: {time.time() - t0:.1f} s")
    cand_rows, pair_rows = ct.summarize(all_blocks, report_by_shape, bytes_by_shape)
    pair_rows = paged_pairs(pair_rows, all_blocks, shape_ids)
    mode = (f"{rounds} rounds, fresh random order each; per block {args.warmup} warm-up + {args.launches} timed "
            f"launches, block value = median; " + ("steady (no L2 flush)" if args.steady else
                                                   "256 MiB L2 flush (read) before every timed launch") +
            "; TB/s = bytes of K and V read / time" +
            ("; torch on K/V expanded to the query heads" if args.expand_heads else "; torch with enable_gqa"))
    text = ct.write_report(args.out, mode, all_blocks, cand_rows, pair_rows, device_text,
                           ct.state_ranges_of(all_blocks), rate_label="TB/s", rate_format=".2f")
    log(f"==== decode comparison ({time.time() - t_start:.0f} s); wrote {args.out}/compare.csv and compare.md")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
