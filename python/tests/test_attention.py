"""The kernels on CPU tensors (torch from Debian's python3-torch, and numpy) against the float64
reference: prefill, causal, varlen, GQA/MQA, contiguous and paged KV caches with shuffled tables."""

import numpy as np
import pytest

import fusetune
from reference import attention_reference, gather_pages

torch = pytest.importorskip("torch", reason="torch is optional; Debian: python3-torch")

TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 2e-2}


def random(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype)


def assert_close(out, ref, dtype=torch.float32):
    got = out.float().numpy().astype(np.float64) if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
    assert np.isfinite(got).all(), "NaN or Inf in the output"
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(got - ref).max()) / scale
    assert err <= TOLERANCE[dtype], f"max error {err:.3g} over {TOLERANCE[dtype]}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len,kv_len", [(17, 17), (17, 40), (33, 9)])
def test_prefill_matches_the_reference(causal, q_len, kv_len):
    q = random(2, q_len, 4, 64, seed=1)
    k = random(2, kv_len, 4, 64, seed=2)
    v = random(2, kv_len, 4, 64, seed=3)
    out = fusetune.attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert_close(out, attention_reference(q, k, v, causal=causal))


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_gqa_and_mqa_follow_from_the_head_counts(kv_heads):
    q = random(2, 12, 8, 32, seed=4)
    k = random(2, 20, kv_heads, 32, seed=5)
    v = random(2, 20, kv_heads, 32, seed=6)
    assert_close(fusetune.attention(q, k, v, causal=True), attention_reference(q, k, v, causal=True))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_storage(dtype):
    q, k, v = (random(1, 24, 2, 64, dtype=dtype, seed=s) for s in (7, 8, 9))
    out = fusetune.attention(q, k, v)
    assert out.dtype == dtype
    assert_close(out, attention_reference(q.float(), k.float(), v.float()), dtype)


def test_softmax_scale_and_out():
    q, k, v = (random(1, 9, 2, 32, seed=s) for s in (10, 11, 12))
    out = torch.full_like(q, float("nan"))
    returned = fusetune.attention(q, k, v, softmax_scale=0.5, out=out)
    assert returned is out
    assert_close(out, attention_reference(q, k, v, scale=0.5))


def test_varlen_with_an_empty_sequence():
    cu_q = [0, 5, 5, 12]
    cu_k = [0, 9, 11, 11]  # the third sequence has no keys: its queries give zeros
    q = random(12, 4, 64, seed=13)
    k = random(11, 2, 64, seed=14)
    v = random(11, 2, 64, seed=15)
    for causal in (False, True):
        out = fusetune.attention(q, k, v, causal=causal, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32),
                                 cu_seqlens_k=np.array(cu_k, dtype=np.int32))
        assert_close(out, attention_reference(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k))
    out = fusetune.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=7, max_seqlen_k=9)
    assert_close(out, attention_reference(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k))


@pytest.mark.parametrize("key", ["fused/bm16/bs32/t2/fp32/st1", "partial/bm32/bs16/t1/fp32/st1",
                                 "materialized/bm64/bs64/t1/fp32/st1"])
def test_an_explicit_config_of_each_variant(key):
    q, k, v = (random(1, 21, 2, 64, seed=s) for s in (16, 17, 18))
    out = fusetune.attention(q, k, v, causal=True, config=key)
    assert_close(out, attention_reference(q, k, v, causal=True))
    out = fusetune.attention(q, k, v, causal=True, config=fusetune.Config.from_key(key))
    assert_close(out, attention_reference(q, k, v, causal=True))


def test_numpy_arrays():
    rng = np.random.default_rng(19)
    q = rng.uniform(-1, 1, (2, 10, 4, 32)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 14, 2, 32)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 14, 2, 32)).astype(np.float32)
    out = fusetune.attention(q, k, v, causal=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == q.shape
    assert_close(out, attention_reference(q, k, v, causal=True))
    half = fusetune.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16))
    assert half.dtype == np.float16
    assert_close(half, attention_reference(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)),
                 torch.float16)


def test_contiguous_kv_cache_with_per_sequence_lengths():
    lengths = [30, 7, 1]
    q = random(3, 2, 8, 64, seed=20)
    k_cache = random(3, 32, 2, 64, seed=21)
    v_cache = random(3, 32, 2, 64, seed=22)
    out = fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(lengths, dtype=torch.int32))
    assert_close(out, attention_reference(q, k_cache, v_cache, causal=True, kv_lens=lengths))
    full = fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=32, causal=False)
    assert_close(full, attention_reference(q, k_cache, v_cache))
    same = fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=9)
    assert_close(same, attention_reference(q, k_cache, v_cache, causal=True, kv_lens=[9, 9, 9]))


def shuffled_pages(batch, pages_per_sequence, pool_pages, seed):
    order = np.random.default_rng(seed).permutation(pool_pages)[: batch * pages_per_sequence]
    return order.reshape(batch, pages_per_sequence).astype(np.int32)


@pytest.mark.parametrize("new_tokens", [1, 4, 20], ids=["decode", "decode4", "prefill-over-cache"])
@pytest.mark.parametrize("page", [1, 16])
def test_paged_cache_through_shuffled_tables(new_tokens, page):
    batch, kv_heads, d = 3, 2, 64
    lengths = [45, 21, 20]  # the new tokens' keys included
    width = -(-max(lengths) // page)
    pool_pages = batch * width + 3
    table = shuffled_pages(batch, width, pool_pages, seed=23 + page)
    k_pool = random(pool_pages, page, kv_heads, d, seed=24)
    v_pool = random(pool_pages, page, kv_heads, d, seed=25)
    used = set(table.ravel().tolist())
    for unused in set(range(pool_pages)) - used:  # a kernel that reads a spare page shows NaN
        k_pool[unused] = float("nan")
        v_pool[unused] = float("nan")
    q = random(batch, new_tokens, 8, d, seed=26)
    out = fusetune.attention_with_kvcache(q, k_pool, v_pool, cache_seqlens=lengths, block_table=torch.from_numpy(table))
    k = gather_pages(k_pool.numpy(), table, lengths)
    v = gather_pages(v_pool.numpy(), table, lengths)
    assert_close(out, attention_reference(q, k, v, causal=True, kv_lens=lengths))


def test_paged_cache_with_numpy():
    rng = np.random.default_rng(27)
    table = shuffled_pages(2, 3, 8, seed=28)
    k_pool = rng.uniform(-1, 1, (8, 4, 1, 32)).astype(np.float32)
    v_pool = rng.uniform(-1, 1, (8, 4, 1, 32)).astype(np.float32)
    q = rng.uniform(-1, 1, (2, 1, 4, 32)).astype(np.float32)
    lengths = np.array([12, 5], dtype=np.int32)
    out = fusetune.attention_with_kvcache(q, k_pool, v_pool, cache_seqlens=lengths, block_table=table)
    k = gather_pages(k_pool, table, lengths)
    v = gather_pages(v_pool, table, lengths)
    assert_close(out, attention_reference(q, k, v, causal=True, kv_lens=lengths))


def test_calls_from_several_threads():
    import threading
    q, k, v = (random(1, 16, 2, 32, seed=s) for s in (29, 30, 31))
    ref = attention_reference(q, k, v, causal=True)
    errors = []

    def work():
        try:
            for _ in range(20):
                assert_close(fusetune.attention(q, k, v, causal=True), ref)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_handle_collected_after_the_module_globals_are_gone_says_nothing():
    # At interpreter shutdown a thread's handles can be collected after the module's globals
    # were cleared: the handle must still be destroyed, without "Exception ignored" on stderr.
    import subprocess
    import sys

    code = (
        "import gc, numpy as np, fusetune\n"
        "from fusetune import kernels\n"
        "q = np.ones((1, 4, 2, 32), np.float32)\n"
        "fusetune.attention(q, q, q)\n"
        "handles = kernels._local.handles\n"
        "kernels._local.handles = {}\n"
        "kernels._capi = None\n"
        "del handles\n"
        "gc.collect()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, check=True)
    assert run.stderr.decode() == ""
