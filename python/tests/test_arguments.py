"""Every bad argument raises fusetune.InvalidArgumentError whose message starts with its name,
before anything runs (out keeps what it held)."""

import numpy as np
import pytest

import fusetune

torch = pytest.importorskip("torch", reason="torch is optional; Debian: python3-torch")


def tensors(batch=1, q_len=8, kv_len=8, heads=4, kv_heads=2, d=32, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.rand(batch, q_len, heads, d, generator=g).to(dtype),
            torch.rand(batch, kv_len, kv_heads, d, generator=g).to(dtype),
            torch.rand(batch, kv_len, kv_heads, d, generator=g).to(dtype))


def raises_naming(name, call):
    with pytest.raises(fusetune.InvalidArgumentError) as info:
        call()
    assert str(info.value).startswith(name + ":") or str(info.value).startswith(name + " ("), str(info.value)
    assert isinstance(info.value, ValueError)
    return info.value


def misaligned(shape, dtype=torch.float32):
    """A contiguous tensor starting one element past an aligned address."""
    n = int(np.prod(shape))
    return torch.zeros(n + 1, dtype=dtype)[1:].view(*shape)


def strided(t):
    """The same shape and values, not contiguous (heads-major memory)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def test_tensor_arguments_of_attention():
    q, k, v = tensors()
    raises_naming("q", lambda: fusetune.attention([[1.0]], k, v))
    raises_naming("k", lambda: fusetune.attention(q, "k", v))
    raises_naming("q", lambda: fusetune.attention(q.double(), k, v))
    raises_naming("k", lambda: fusetune.attention(q, k.half(), v))
    raises_naming("v", lambda: fusetune.attention(q, k, v[:, :7].contiguous()))
    raises_naming("k", lambda: fusetune.attention(q, k.numpy(), v))
    raises_naming("q", lambda: fusetune.attention(q[0], k, v))
    raises_naming("k", lambda: fusetune.attention(q, k[0], v[0]))
    raises_naming("k", lambda: fusetune.attention(q, torch.cat([k, k]), torch.cat([v, v])))
    raises_naming("k", lambda: fusetune.attention(q, k[..., :16].contiguous(), v[..., :16].contiguous()))
    raises_naming("q", lambda: fusetune.attention(strided(q), k, v))
    raises_naming("k", lambda: fusetune.attention(q, strided(k), v))
    raises_naming("v", lambda: fusetune.attention(q, k, strided(v)))
    raises_naming("q", lambda: fusetune.attention(misaligned(q.shape), k, v))
    raises_naming("k", lambda: fusetune.attention(q, misaligned(k.shape), v))
    raises_naming("v", lambda: fusetune.attention(q, k, misaligned(v.shape)))


def test_out():
    q, k, v = tensors()
    raises_naming("out", lambda: fusetune.attention(q, k, v, out=torch.empty(1, 8, 4, 16)))
    raises_naming("out", lambda: fusetune.attention(q, k, v, out=torch.empty_like(q).half()))
    raises_naming("out", lambda: fusetune.attention(q, k, v, out=np.empty(q.shape, np.float32)))
    raises_naming("out", lambda: fusetune.attention(q, k, v, out=strided(torch.empty_like(q))))
    out = misaligned(q.shape)
    out.fill_(7.0)
    raises_naming("out", lambda: fusetune.attention(q, k, v, out=out))
    assert bool((out == 7.0).all()), "out was written"


def test_the_problem_checked_by_the_c_abi_names_the_argument():
    q, k, v = tensors(heads=4, kv_heads=3)
    e = raises_naming("k", lambda: fusetune.attention(q, k, v))
    assert "kv_heads" in str(e)  # the C ABI's message, naming the field
    q, k, v = tensors(d=20)
    raises_naming("q", lambda: fusetune.attention(q, k, v))
    q, k, v = tensors()
    raises_naming("softmax_scale", lambda: fusetune.attention(q, k, v, softmax_scale=-1.0))
    raises_naming("softmax_scale", lambda: fusetune.attention(q, k, v, softmax_scale=float("nan")))
    raises_naming("softmax_scale", lambda: fusetune.attention(q, k, v, softmax_scale="big"))
    raises_naming("softmax_scale", lambda: fusetune.attention(q, k, v, softmax_scale=[0.5]))
    raises_naming("softmax_scale", lambda: fusetune.attention_with_kvcache(q, k, v, cache_seqlens=8, softmax_scale=[1]))
    raises_naming("config", lambda: fusetune.attention(q, k, v, config="fused/garbage"))
    raises_naming("config", lambda: fusetune.attention(q, k, v, config=42))
    raises_naming("config", lambda: fusetune.attention(q, k, v, config=fusetune.Config(variant="best")))


def test_a_config_the_backend_cannot_run_is_not_an_argument_error():
    q, k, v = tensors()
    with pytest.raises(fusetune.UnimplementedError, match="block_s"):
        fusetune.attention(q, k, v, config="fused/bm64/bs48/t1/fp32/st1")


def test_varlen_arguments():
    q = torch.rand(10, 4, 32)
    k = torch.rand(12, 2, 32)
    v = torch.rand(12, 2, 32)
    cu_q, cu_k = [0, 4, 10], [0, 5, 12]
    assert fusetune.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k).shape == q.shape
    raises_naming("cu_seqlens_k", lambda: fusetune.attention(q, k, v, cu_seqlens_q=cu_q))
    raises_naming("cu_seqlens_q", lambda: fusetune.attention(q, k, v, cu_seqlens_k=cu_k))
    raises_naming("cu_seqlens_k", lambda: fusetune.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=[0, 12]))
    raises_naming("cu_seqlens_q", lambda: fusetune.attention(q, k, v, cu_seqlens_q=[0, 7, 6, 10],
                                                             cu_seqlens_k=[0, 5, 6, 12]))
    raises_naming("cu_seqlens_q", lambda: fusetune.attention(q, k, v, cu_seqlens_q=torch.tensor(cu_q),  # int64
                                                             cu_seqlens_k=cu_k))
    raises_naming("cu_seqlens_q", lambda: fusetune.attention(q, k, v, cu_seqlens_q="0,4,10", cu_seqlens_k=cu_k))
    raises_naming("q", lambda: fusetune.attention(q, k, v, cu_seqlens_q=[0, 4, 9], cu_seqlens_k=cu_k))
    raises_naming("k", lambda: fusetune.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=[0, 5, 11]))
    raises_naming("max_seqlen_q", lambda: fusetune.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                                             max_seqlen_q=9))
    raises_naming("q", lambda: fusetune.attention(q[None], k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k))


def paged_inputs():
    q = torch.rand(2, 1, 4, 32)
    pool = torch.rand(6, 4, 2, 32)
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    return q, pool, pool.clone(), table


def test_kv_cache_arguments():
    q, k_cache, v_cache, table = paged_inputs()
    ok = fusetune.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=table)
    assert ok.shape == q.shape
    call = fusetune.attention_with_kvcache
    raises_naming("cache_seqlens", lambda: call(q, k_cache, v_cache, cache_seqlens=None, block_table=table))
    raises_naming("cache_seqlens", lambda: call(q, k_cache, v_cache, cache_seqlens=[13, 5], block_table=table))
    raises_naming("cache_seqlens", lambda: call(q, k_cache, v_cache, cache_seqlens=[-1, 5], block_table=table))
    raises_naming("cache_seqlens", lambda: call(q, k_cache, v_cache, cache_seqlens=[5], block_table=table))
    raises_naming("cache_seqlens", lambda: call(q, k_cache, v_cache, cache_seqlens=13, block_table=table))
    raises_naming("block_table", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=table.long()))
    raises_naming("block_table", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=table[:1]))
    raises_naming("block_table", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=table.t()))
    raises_naming("block_table", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=[[0]]))
    outside = torch.tensor([[0, 1, 2], [3, 6, 5]], dtype=torch.int32)  # page 6 of a 6-page pool
    e = raises_naming("block_table", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=outside))
    assert "pool" in str(e)
    raises_naming("v_cache", lambda: call(q, k_cache, v_cache[:5].contiguous(), cache_seqlens=[12, 5],
                                          block_table=table))
    raises_naming("k_cache", lambda: call(q, k_cache.half(), v_cache.half(), cache_seqlens=[12, 5], block_table=table))
    raises_naming("k_cache", lambda: call(q, k_cache[..., :16].contiguous(), v_cache[..., :16].contiguous(),
                                          cache_seqlens=[12, 5], block_table=table))
    contiguous = torch.rand(3, 12, 2, 32)
    raises_naming("k_cache", lambda: call(q, contiguous, contiguous, cache_seqlens=[12, 5]))
    raises_naming("q", lambda: call(q[0], k_cache, v_cache, cache_seqlens=[12, 5], block_table=table))
    raises_naming("out", lambda: call(q, k_cache, v_cache, cache_seqlens=[12, 5], block_table=table,
                                      out=torch.empty(2, 1, 4, 16)))


def test_numpy_arguments():
    q = np.zeros((1, 4, 2, 32), np.float32)
    raises_naming("q", lambda: fusetune.attention(q.astype(np.float64), q, q))
    raises_naming("k", lambda: fusetune.attention(q, q.astype(np.float16), q))
    raises_naming("q", lambda: fusetune.attention(np.asfortranarray(q), q, q))
    table = np.zeros((1, 1), np.int64)
    raises_naming("block_table", lambda: fusetune.attention_with_kvcache(q, q, q, cache_seqlens=4, block_table=table))
