#!/usr/bin/env python3
"""Checks fused-kernel builds against a float64 reference on random problems, on one GPU.

A kernel variant (kernels/cuda/dev/build_hopper_dev.sh) is compared with the shipped kernels
by compare_torch.py on a few flagship shapes; before its times mean anything, its outputs must
be right on the problems those shapes never reach. This runs every library given (--lib, the
full libfusetune_capi.so, and each --variant LABEL=LIB) with every --config key on:
  - a fixed list that walks the Hopper schedules' edges: one tile, an odd and an even count of
    query tiles, a last query tile of one row, key counts that end inside a key tile, GQA, a
    causal mask with more queries than keys (rows that see no key), one key, many rounds;
  - --problems random ones (uniform batches: lengths 1..3000, heads 1..16 with GQA divisors,
    causal or not), each with one of four input patterns: uniform in [-1, 1]; Q scaled by 16
    (scores in the hundreds: the running maximum must be subtracted); a shared offset on every
    key row (every score large and positive); one key per query far above the rest (a softmax
    that is almost one-hot).
The output is poisoned with NaN before each run; |out - ref|max / |ref|max must stay within the
full library's tolerance for the precision and dtype (fusetune_tolerance), and rows that see no
key must be zeros. A configuration a library cannot run on a problem (fusetune_can_implement) is
counted as skipped with its reason, not as a failure.

  check_hopper_dev.py --lib BUNDLE/lib/libfusetune_capi.so \\
      --variant NAME=/tmp/hd/NAME/libfusetune_hopper_dev.so \\
      --config 'fused/bm128/bs128/t384/{p}/st2/persistent' [--problems 40] [--small]

{p} in a key is the problem's precision (fp16 or bf16: the dtype's). --small keeps to problems
of at most 512 queries and keys, and --reference-on-cpu computes the reference on the CPU, for
compute-sanitizer (`compute-sanitizer --tool memcheck python3 ci/device/check_hopper_dev.py
--small --reference-on-cpu ...`: the GPU then runs little besides the kernels checked). Writes check.csv under --out; exit status
0 when nothing failed, 1 when something did, 2 for bad arguments (--self-test: 77 without
PyTorch, which a test runner reads as skipped).
"""
import argparse
import csv
import importlib.util
import math
import os
import random
import sys

try:
    import torch
except ImportError:
    torch = None


def load_compare_torch():
    """compare_torch.py beside this file: its ctypes bindings (Problem, Config, Fusetune); the one
    already loaded where there is one (the dry run's, on the CPU backend)."""
    if "compare_torch" in sys.modules:
        return sys.modules["compare_torch"]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_torch.py")
    spec = importlib.util.spec_from_file_location("compare_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FP16, BF16 = 1, 2
DEVICE = "cuda"  # --self-test: "cpu"
PATTERNS = ("uniform", "scaled-q", "key-offset", "one-hot")

# (batch, q_heads, kv_heads, q_len, kv_len, causal, dtype): the schedules' edges at block_m 128,
# block_s 128: even and odd counts of query tiles, key counts that end inside a tile.
FIXED = [
    (1, 1, 1, 256, 256, False, BF16),     # two query tiles
    (2, 3, 3, 1000, 777, False, BF16),    # 8 query tiles, the last key tile 9 keys
    (1, 2, 2, 384, 512, False, FP16),     # 3 query tiles: odd
    (2, 8, 2, 512, 1000, False, BF16),    # GQA 4:1
    (1, 4, 4, 129, 4096, False, FP16),    # 2 query tiles, the second of one row
    (1, 2, 2, 512, 512, True, BF16),      # causal
    (1, 2, 2, 700, 300, True, FP16),      # causal, 400 rows that see no key
    (2, 64, 64, 1024, 1024, True, FP16),  # causal: 8 query tiles, 256 pairs of them (more than the blocks)
    (2, 40, 10, 1100, 1300, True, BF16),  # causal, GQA 4:1, keys before the queries, 9 query tiles: odd
    (1, 1, 1, 128, 1, False, BF16),       # one key
    (3, 20, 4, 2048, 300, False, FP16),   # many rounds of a persistent grid, GQA 5:1
    # Last rounds a split spreads along the keys on 132 blocks (SplitTail; the first three split
    # only in a kernel that splits after fewer whole rounds than a tail launch's minimum):
    (1, 35, 5, 500, 487, False, FP16),    # 140 tiles: a whole round, then 8 tiles in spans of 1 key tile
    (1, 212, 4, 77, 500, False, BF16),    # 212 one-row-block tiles: 80 in spans of 3 of 4 key tiles
    (1, 181, 1, 100, 1000, False, FP16),  # MQA, 49 tiles in spans of 3 of 8 key tiles
    (2, 535, 107, 7, 400, False, FP16),   # 1070 tiles: 8 whole rounds, then 14 (a tail launch)
    (8, 16, 16, 1024, 1024, False, FP16),  # the mid-size flagship
    (4, 16, 16, 4096, 4096, False, BF16),  # the large flagship
]
SMALL_LIMIT = 512


def random_problem(rng, small):
    top = SMALL_LIMIT if small else 3000
    kv_heads = rng.choice([1, 2, 4, 8])
    group = rng.choice([1, 1, 2, 4])
    return (rng.randint(1, 3), kv_heads * group, kv_heads, rng.randint(1, top), rng.randint(1, top),
            rng.random() < 0.3, rng.choice([FP16, BF16]))


def make_inputs(problem, pattern, gen):
    """q [b*q_len][hq][d], k and v [b*kv_len][hkv][d] in the storage dtype (float32 first)."""
    b, hq, hkv, nq, nk, _, dtype = problem
    d = 128
    tdt = torch.bfloat16 if dtype == BF16 else torch.float16

    def uniform(*shape):
        return torch.rand(*shape, device=DEVICE, generator=gen) * 2 - 1
    q, k, v = uniform(b * nq, hq, d), uniform(b * nk, hkv, d), uniform(b * nk, hkv, d)
    if pattern == "scaled-q":
        q = q * 16
    elif pattern == "key-offset":
        k = k * 0.25 + 2.0
        q = q * 0.25 + 2.0
    elif pattern == "one-hot" and nk > 1:
        # Query row i of every head points along key row (i * 7) % nk of its sequence.
        for s in range(b):
            rows = (torch.arange(nq, device=DEVICE) * 7) % nk
            q[s * nq:(s + 1) * nq] = k[s * nk + rows].repeat_interleave(hq // hkv, dim=1) * 12
    return q.to(tdt), k.to(tdt), v.to(tdt)


def reference(problem, q, k, v, scale):
    """float64 attention, [b*q_len][hq][d], on the inputs' device; rows that see no key are
    zeros. The causal mask is aligned bottom-right: query i sees key j when j <= i + kv_len - q_len."""
    b, hq, hkv, nq, nk, causal, _ = problem
    d = q.shape[-1]
    device = q.device
    out = torch.zeros(b * nq, hq, d, dtype=torch.float64, device=device)
    for s in range(b):
        qs = q[s * nq:(s + 1) * nq].double().transpose(0, 1)                      # hq, nq, d
        ks = k[s * nk:(s + 1) * nk].double().transpose(0, 1).repeat_interleave(hq // hkv, dim=0)
        vs = v[s * nk:(s + 1) * nk].double().transpose(0, 1).repeat_interleave(hq // hkv, dim=0)
        sc = torch.matmul(qs, ks.transpose(-1, -2)) * scale
        if causal:
            i = torch.arange(nq, device=device).unsqueeze(1)
            j = torch.arange(nk, device=device).unsqueeze(0)
            sc = sc.masked_fill(j > i + (nk - nq), float("-inf"))
        p = torch.softmax(sc, dim=-1)
        p = torch.nan_to_num(p, nan=0.0)  # a row of -inf: no key, zeros
        out[s * nq:(s + 1) * nq] = torch.matmul(p, vs).transpose(0, 1)
    return out


def self_test():
    """The reference and the input patterns on the CPU against a plain per-row loop: GQA, a causal
    mask with more queries than keys (rows without keys are zeros), every pattern finite."""
    global DEVICE
    DEVICE = "cpu"
    gen = torch.Generator(device="cpu")
    gen.manual_seed(3)
    problem = (2, 4, 2, 7, 5, True, BF16)
    for pattern in PATTERNS:
        q, k, v = make_inputs(problem, pattern, gen)
        assert all(torch.isfinite(x.float()).all() for x in (q, k, v)), pattern
    q, k, v = make_inputs(problem, "uniform", gen)
    scale = 0.3
    ref = reference(problem, q, k, v, scale)
    b, hq, hkv, nq, nk, _, _ = problem
    for s in range(b):
        for h in range(hq):
            g = h // (hq // hkv)
            for i in range(nq):
                visible = [j for j in range(nk) if j <= i + nk - nq]
                row = ref[s * nq + i, h]
                if not visible:
                    assert row.abs().max().item() == 0.0, (s, h, i)
                    continue
                logits = [float((q[s * nq + i, h].double() * k[s * nk + j, g].double()).sum()) * scale for j in visible]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                want = sum(w * v[s * nk + j, g].double() for w, j in zip(weights, visible)) / sum(weights)
                assert (row - want).abs().max().item() < 1e-9, (s, h, i)
    print("check_hopper_dev: self-test passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="the full libfusetune_capi.so (key parser, tolerances); required but for --self-test")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=LIB",
                    help="a further library to check (e.g. a build_hopper_dev.sh variant)")
    ap.add_argument("--config", action="append", default=[], metavar="KEY", help="fused config key ({p}: precision)")
    ap.add_argument("--problems", type=int, default=40, help="random problems after the fixed ones")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--small", action="store_true", help=f"problems of at most {SMALL_LIMIT} queries and keys")
    ap.add_argument("--reference-on-cpu", action="store_true",
                    help="compute the float64 reference on the CPU (under compute-sanitizer: no cuBLAS kernels "
                         "to instrument besides ours)")
    ap.add_argument("--no-full", action="store_true", help="check the --variant libraries only")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--self-test", action="store_true", help="check the reference on the CPU; no GPU")
    args = ap.parse_args()
    if args.self_test:
        if torch is None:
            print("check_hopper_dev: the self-test needs PyTorch (skipped)", file=sys.stderr)
            return 77
        return self_test()
    if torch is None or not torch.cuda.is_available():
        print("check_hopper_dev: needs PyTorch with a CUDA GPU", file=sys.stderr)
        return 2
    if not args.lib or not args.config or args.problems < 0:
        print("check_hopper_dev: give --lib, at least one --config, and --problems >= 0", file=sys.stderr)
        return 2
    ct = load_compare_torch()
    full = ct.Fusetune(args.lib)
    libs = [] if args.no_full else [("full", full)]
    for item in args.variant:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            print(f"check_hopper_dev: --variant {item}: expected LABEL=LIB", file=sys.stderr)
            return 2
        libs.append((label, ct.Fusetune(path)))
    if not libs:
        print("check_hopper_dev: nothing to check (--no-full without --variant)", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}; " + "; ".join(f"{label}: {lib.describe()}" for label, lib in libs),
          flush=True)

    rng = random.Random(args.seed)
    problems = [p for p in FIXED if not args.small or max(p[3], p[4]) <= SMALL_LIMIT]
    problems += [random_problem(rng, args.small) for _ in range(args.problems)]
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    with open(os.path.join(args.out, "check.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["problem", "pattern", "library", "config", "outcome", "error", "tolerance", "detail"])
        for n, problem in enumerate(problems):
            b, hq, hkv, nq, nk, causal, dtype = problem
            pattern = PATTERNS[0] if n < len(FIXED) and n % 2 == 0 else rng.choice(PATTERNS)
            precision = "bf16" if dtype == BF16 else "fp16"
            tol = full.tolerance(precision, dtype)
            scale = 1.0 / math.sqrt(128)
            q, k, v = make_inputs(problem, pattern, gen)
            if args.reference_on_cpu:
                ref = reference(problem, q.cpu(), k.cpu(), v.cpu(), scale).to(q.device)
            else:
                ref = reference(problem, q, k, v, scale)
            ref_max = ref.abs().max().item()
            c_problem = ct.Problem(b, hq, hkv, nq, nk, 128, 1 if causal else 0, dtype, 0.0, None, None, None)
            name = f"b{b} hq{hq} hkv{hkv} q{nq} k{nk}{' causal' if causal else ''} {precision}"
            for key_template in args.config:
                key = key_template.replace("{p}", precision)
                config = full.config(key)
                for label, lib in libs:
                    ok, why = lib.can_implement(c_problem, config)
                    if not ok:
                        counts["skipped"] += 1
                        w.writerow([name, pattern, label, key, "skipped", "", tol, why])
                        continue
                    o = torch.full_like(q, float("nan"))
                    try:
                        lib.run(c_problem, config, q, k, v, o)
                        torch.cuda.synchronize()
                    except RuntimeError as e:
                        counts["failed"] += 1
                        w.writerow([name, pattern, label, key, "failed", "", tol, str(e)])
                        print(f"FAIL {name} {pattern} {label} {key}: {e}", flush=True)
                        continue
                    out = o.double()
                    if not torch.isfinite(out).all():
                        err, detail = float("nan"), f"{int((~torch.isfinite(out)).sum())} non-finite outputs"
                    else:
                        err = (out - ref).abs().max().item() / (ref_max if ref_max > 0 else 1.0)
                        detail = ""
                    passed = err <= tol  # False for NaN
                    counts["passed" if passed else "failed"] += 1
                    w.writerow([name, pattern, label, key, "passed" if passed else "failed", f"{err:.3e}", tol,
                                detail])
                    if not passed:
                        print(f"FAIL {name} {pattern} {label} {key}: error {err:.3e} > {tol:.1e} {detail}",
                              flush=True)
            print(f"[{n + 1}/{len(problems)}] {name} {pattern}", flush=True)
    print(f"check_hopper_dev: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"({len(problems)} problems x {len(args.config)} configs x {len(libs)} libraries)")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
