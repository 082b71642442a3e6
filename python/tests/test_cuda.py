"""The CUDA path of fusetune.attention / attention_with_kvcache, on a GPU.

Against a float64 reference and torch's own attention (SDPA): the flagship prefill shapes (bf16
b4 h16 d128 S=4096, causal and not; fp16 b1 h12 d64 S=2048) and the decode preset's serving
shape (b16, 32 query and 8 KV heads, d128, bf16, 8k-key caches, contiguous and paged by 16 with a
shuffled table). Launches go on the caller's current stream without synchronizing (a kernel on
another stream would read the inputs before the stream wrote them); they work inside
torch.cuda.graph capture (replayed after the inputs and the cache lengths changed in place); and
what a capture cannot do (copy host lengths, allocate) is refused with an exception, the capture
left intact.

Skipped, saying why, where torch or a CUDA device is missing. Runs under pytest (ctest:
python_cuda_test, label gpu) or as a script without pytest (`python3 test_cuda.py`, as
ci/device/python_check.sh does on a GPU host): exit 0 all passed, 1 a failure, 77 all skipped.
"""

import math
import sys
import threading
import traceback

try:
    import pytest
except ImportError:  # run as a script on a host without pytest
    pytest = None

import fusetune

try:
    import torch
except ImportError:
    torch = None


def _why_skipped():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device (torch.cuda.is_available() is False)"
    return None


SKIP_REASON = _why_skipped()
if pytest is not None and SKIP_REASON:
    pytestmark = pytest.mark.skip(reason=SKIP_REASON)

# The tolerance of the C++ tests (ToleranceFor in kernels/reference/reference.cc): the largest
# error relative to the largest reference value.
TOLERANCE = {"bfloat16": 1.6e-2, "float16": 4e-3, "float32": 1e-4}


def tolerance(dtype):
    return TOLERANCE[str(dtype).replace("torch.", "")]


class _Raises:
    """pytest.raises where pytest is missing."""

    def __init__(self, kind, match):
        self.kind, self.match, self.value = kind, match, None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"did not raise {self.kind.__name__}")
        if not issubclass(kind, self.kind):
            return False
        if self.match and self.match not in str(value):
            raise AssertionError(f"{value!r} does not say {self.match!r}")
        self.value = value
        return True


def raises(kind, match=None):
    return _Raises(kind, match)


# ---------------------------------------------------------------- references

def reference(q, k, v, causal, kv_lens=None):
    """float64, one sequence and KV group at a time: q (b, sq, hq, d), k/v (b, sk, hkv, d);
    kv_lens hides keys from kv_lens[b] on; causal is bottom-right aligned."""
    b, sq, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    out = torch.zeros(b, sq, hq, d, dtype=torch.float64, device=q.device)
    with torch.no_grad():
        for i in range(b):
            n = k.shape[1] if kv_lens is None else int(kv_lens[i])
            if n == 0:
                continue
            qi = q[i].double().view(sq, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * sq, d)
            ki = k[i, :n].double().permute(1, 2, 0)   # (hkv, d, n)
            vi = v[i, :n].double().permute(1, 0, 2)   # (hkv, n, d)
            scores = torch.matmul(qi, ki) / math.sqrt(d)
            if causal:
                row = torch.arange(sq, device=q.device).repeat(g).unsqueeze(1)
                col = torch.arange(n, device=q.device).unsqueeze(0)
                scores = scores.masked_fill(col > row + (n - sq), float("-inf"))
            p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
            o = torch.matmul(p, vi)                             # (hkv, g*sq, d)
            out[i] = o.view(hkv, g, sq, d).permute(2, 0, 1, 3).reshape(sq, hq, d)
    return out


def torch_attention(q, k, v, causal, kv_lens=None):
    """torch's own attention (SDPA) on the same tensors, in their dtype."""
    import torch.nn.functional as F
    b, sq, hq, d = q.shape
    hkv = k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if hkv != hq:
        kt = kt.repeat_interleave(hq // hkv, dim=1)
        vt = vt.repeat_interleave(hq // hkv, dim=1)
    sk = kt.shape[2]
    if kv_lens is None and (not causal or sq == sk):
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    else:
        lens = torch.full((b,), sk, device=q.device) if kv_lens is None else kv_lens.to(q.device).long()
        col = torch.arange(sk, device=q.device).view(1, 1, 1, sk)
        row = torch.arange(sq, device=q.device).view(1, 1, sq, 1)
        n = lens.view(b, 1, 1, 1)
        keep = col < n
        if causal:
            keep = keep & (col <= row + n - sq)
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=keep)
    return out.transpose(1, 2)


def relative_error(out, ref):
    out = out.double()
    assert torch.isfinite(out).all(), "NaN or Inf in the output"
    return float((out - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


def expect_close(out, ref, dtype, what=""):
    err = relative_error(out, ref)
    assert err <= tolerance(dtype), f"{what}: relative error {err:.3g} over {tolerance(dtype)}"
    return err


def randn(*shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


# ---------------------------------------------------------------- prefill

FLAGSHIP_PREFILL = [  # (batch, heads, seqlen, head_dim, dtype, causal)
    (4, 16, 4096, 128, "bfloat16", False),
    (4, 16, 4096, 128, "bfloat16", True),
    (1, 12, 2048, 64, "float16", False),
]


def test_flagship_prefill_matches_the_reference_and_torch():
    for batch, heads, seqlen, d, dtype_name, causal in FLAGSHIP_PREFILL:
        dtype = getattr(torch, dtype_name)
        q, k, v = (randn(batch, seqlen, heads, d, dtype=dtype, seed=s) for s in (1, 2, 3))
        ours = fusetune.attention(q, k, v, causal=causal)
        torch.cuda.synchronize()
        ref = reference(q, k, v, causal)
        what = f"b{batch} h{heads} S={seqlen} d{d} {dtype_name} causal={causal}"
        err = expect_close(ours, ref, dtype, what)
        theirs = torch_attention(q, k, v, causal)
        err_torch = relative_error(theirs, ref)
        # Ours is as close to torch's attention as either is to the exact result.
        gap = relative_error(ours, theirs.double())
        assert gap <= 2 * tolerance(dtype), f"{what}: ours and torch's differ by {gap:.3g}"
        print(f"[ info ] {what}: error ours {err:.2e}, torch {err_torch:.2e}")


def test_gqa_varlen_and_odd_lengths():
    dtype = torch.bfloat16
    q, k, v = randn(2, 77, 8, 128, dtype=dtype, seed=4), randn(2, 130, 2, 128, dtype=dtype, seed=5), \
        randn(2, 130, 2, 128, dtype=dtype, seed=6)
    expect_close(fusetune.attention(q, k, v, causal=True), reference(q, k, v, True), dtype, "gqa causal")
    # Packed: two sequences of 77/130 and 40/60, prefix sums as int32 CUDA tensors.
    cu_q = torch.tensor([0, 77, 117], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 130, 190], dtype=torch.int32, device="cuda")
    pq = randn(117, 8, 128, dtype=dtype, seed=7)
    pk, pv = randn(190, 2, 128, dtype=dtype, seed=8), randn(190, 2, 128, dtype=dtype, seed=9)
    out = fusetune.attention(pq, pk, pv, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    torch.cuda.synchronize()
    for (qs, qe), (ks, ke) in (((0, 77), (0, 130)), ((77, 117), (130, 190))):
        ref = reference(pq[None, qs:qe], pk[None, ks:ke], pv[None, ks:ke], True)
        expect_close(out[None, qs:qe], ref, dtype, "varlen")


# ---------------------------------------------------------------- decode

def decode_inputs(paged, seed=10):
    batch, hq, hkv, d, cache = 16, 32, 8, 128, 8192
    dtype = torch.bfloat16
    q = randn(batch, 1, hq, d, dtype=dtype, seed=seed)
    k = randn(batch, cache, hkv, d, dtype=dtype, seed=seed + 1)
    v = randn(batch, cache, hkv, d, dtype=dtype, seed=seed + 2)
    lengths = torch.tensor([cache - 97 * i for i in range(batch)], dtype=torch.int32, device="cuda")
    if not paged:
        return q, k, v, k, v, lengths, None
    page = 16
    width = cache // page
    pool = batch * width + 5
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(pool, generator=g)[: batch * width].view(batch, width)
    table = order.to(torch.int32).cuda()
    k_pool = torch.full((pool, page, hkv, d), float("nan"), dtype=dtype, device="cuda")
    v_pool = torch.full((pool, page, hkv, d), float("nan"), dtype=dtype, device="cuda")
    k_pool[table.long().view(-1)] = k.view(batch * width, page, hkv, d)
    v_pool[table.long().view(-1)] = v.view(batch * width, page, hkv, d)
    return q, k, v, k_pool, v_pool, lengths, table


def test_decode_preset_shape_contiguous_and_paged():
    for paged in (False, True):
        q, k, v, k_cache, v_cache, lengths, table = decode_inputs(paged)
        ours = fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
        torch.cuda.synchronize()
        ref = reference(q, k, v, True, lengths.cpu())
        what = f"decode b16 hq32 hkv8 d128 bf16 cache 8k {'paged16' if paged else 'contiguous'}"
        err = expect_close(ours, ref, torch.bfloat16, what)
        theirs = torch_attention(q, k, v, True, lengths)
        print(f"[ info ] {what}: error ours {err:.2e}, torch {relative_error(theirs, ref):.2e}")


# ---------------------------------------------------------------- streams and graphs

def test_launches_on_the_current_stream_without_waiting():
    dtype = torch.bfloat16
    q, k, v = (randn(2, 512, 8, 128, dtype=dtype, seed=s) for s in (11, 12, 13))
    later_q = randn(2, 512, 8, 128, dtype=dtype, seed=14)
    out = torch.empty_like(q)
    fusetune.attention(q, k, v, out=out)  # warm: the handle and the plan exist
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(2_000_000_000)   # about a second of GPU time on this stream
        q.copy_(later_q)                   # written after the sleep, on this stream
        fusetune.attention(q, k, v, out=out)
        # Enqueued, not waited for: the stream is still sleeping.
        assert not stream.query(), "fusetune.attention waited for the stream"
    stream.synchronize()
    # A launch on any other stream would have read q before the copy.
    expect_close(out, reference(later_q, k, v, False), dtype, "non-default stream")


def test_captured_into_a_cuda_graph_and_replayed():
    dtype = torch.bfloat16
    q, k, v = (randn(1, 1024, 16, 128, dtype=dtype, seed=s) for s in (15, 16, 17))
    out = torch.empty_like(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch asks
        fusetune.attention(q, k, v, causal=True, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fusetune.attention(q, k, v, causal=True, out=out)
    for seed in (18, 19):
        q.copy_(randn(1, 1024, 16, 128, dtype=dtype, seed=seed))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expect_close(out, reference(q, k, v, True), dtype, f"graph replay {seed}")


def test_a_captured_decode_reads_the_cache_lengths_when_replayed():
    for paged in (False, True):
        q, k, v, k_cache, v_cache, lengths, table = decode_inputs(paged, seed=20)
        out = torch.empty_like(q)
        fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table, out=out)
        for shrink in (0, 1000):
            lengths.sub_(shrink)  # in place: the graph reads the new lengths
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            expect_close(out, reference(q, k, v, True, lengths.cpu()), torch.bfloat16,
                         f"decode graph {'paged' if paged else 'contiguous'} lengths -{shrink}")


def test_what_a_capture_cannot_do_is_refused():
    dtype = torch.bfloat16
    q, k, v = (randn(1, 64, 4, 64, dtype=dtype, seed=s) for s in (21, 22, 23))
    out = torch.empty_like(q)
    fusetune.attention(q, k, v, out=out)
    torch.cuda.synchronize()
    packed = q.view(64, 4, 64)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with raises(fusetune.InvalidArgumentError, "cu_seqlens_q"):  # host lengths need a copy
            fusetune.attention(packed, packed, packed, cu_seqlens_q=[0, 64], cu_seqlens_k=[0, 64])
        fusetune.attention(q, k, v, out=out)  # the capture goes on
    graph.replay()
    torch.cuda.synchronize()
    expect_close(out, reference(q, k, v, False), dtype, "after a refusal")

    # A thread's first decode with 16 KV splits needs workspace: refused while capturing (its
    # handle is new, so nothing is allocated yet), then fine after one launch outside.
    dq, _, _, dk, dv, lengths, _ = decode_inputs(False, seed=24)
    torch.cuda.synchronize()  # the thread's stream does not wait for this one
    split16 = fusetune.Config.from_key("fused/bm16/bs64/t128/bf16/st2/sk16")
    result = {}

    def in_a_new_thread():
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                fusetune.attention(q, k, v, out=out)  # this thread's handle
            stream.synchronize()
            capture = torch.cuda.CUDAGraph()
            with torch.cuda.graph(capture):
                try:
                    fusetune.attention_with_kvcache(dq, dk, dv, cache_seqlens=lengths, config=split16)
                except fusetune.FailedPreconditionError as e:
                    result["refused"] = str(e)
                fusetune.attention(q, k, v, out=out)
            with torch.cuda.stream(stream):
                result["out"] = fusetune.attention_with_kvcache(dq, dk, dv, cache_seqlens=lengths, config=split16)
            stream.synchronize()
        except Exception:  # noqa: BLE001 - reported by the test
            result["error"] = traceback.format_exc()

    thread = threading.Thread(target=in_a_new_thread)
    thread.start()
    thread.join()
    assert "error" not in result, result.get("error")
    assert "before capturing" in result.get("refused", ""), result
    expect_close(result["out"], reference(dq, dk, dv, True, lengths.cpu()), torch.bfloat16, "after the refusal")


def test_device_class_is_the_gpus():
    assert fusetune.device_class(0).startswith("cuda/")
    assert fusetune.device_class("cuda:0") == fusetune.device_class(0)


# ---------------------------------------------------------------- without pytest

def _main():
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    if SKIP_REASON:
        print(f"SKIPPED: {SKIP_REASON}")
        return 77
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASSED {name}")
        except Exception:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAILED {name}\n{traceback.format_exc()}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
