"""The float64 reference the kernel tests compare with: FlashAttention's semantics, written
out plainly (numpy, one sequence and head at a time)."""

import math

import numpy as np


def attention_reference(q, k, v, *, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        kv_lens=None):
    """softmax(q kᵀ · scale) v in float64.

    Uniform: q (batch, seqlen_q, heads, d), k/v (batch, seqlen_k, kv_heads, d); kv_lens hides the
    keys of sequence b from kv_lens[b] on. Varlen: q (total_q, heads, d), k/v (total_k, kv_heads, d)
    with prefix sums. Causal masks are bottom-right aligned (query i of q queries sees keys
    j <= i + k - q); a query that sees no key gives zeros. Query head h reads KV head
    h // (heads // kv_heads).
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if cu_seqlens_q is not None:
        out = np.zeros_like(q)
        for b in range(len(cu_seqlens_q) - 1):
            qs, qe = cu_seqlens_q[b], cu_seqlens_q[b + 1]
            ks, ke = cu_seqlens_k[b], cu_seqlens_k[b + 1]
            out[qs:qe] = _sequence(q[qs:qe], k[ks:ke], v[ks:ke], ke - ks, causal, scale)
        return out
    out = np.zeros_like(q)
    for b in range(q.shape[0]):
        visible = k.shape[1] if kv_lens is None else int(kv_lens[b])
        out[b] = _sequence(q[b], k[b], v[b], visible, causal, scale)
    return out


def _sequence(q, k, v, visible, causal, scale):
    """One sequence: q (sq, hq, d), k/v (rows, hkv, d) of which the first `visible` are keys."""
    sq, hq, d = q.shape
    hkv = k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((sq, hq, d))
    for h in range(hq):
        kh = h // (hq // hkv)
        keys = k[:visible, kh, :]
        values = v[:visible, kh, :]
        scores = q[:, h, :] @ keys.T * scale
        for i in range(sq):
            seen = min(visible, i + visible - sq + 1) if causal else visible
            if seen <= 0:
                continue
            row = scores[i, :seen]
            p = np.exp(row - row.max())
            out[i, h, :] = (p / p.sum()) @ values[:seen]
    return out


def gather_pages(pool, block_table, lengths):
    """The keys of each sequence of a paged pool (num_pages, page, kv_heads, d) laid out
    contiguously: (batch, pages per sequence * page, kv_heads, d), rows past a length zero."""
    pool = np.asarray(pool, dtype=np.float64)
    page = pool.shape[1]
    width = block_table.shape[1]
    out = np.zeros((len(lengths), width * page) + pool.shape[2:])
    for b, n in enumerate(lengths):
        for j in range(n):
            out[b, j] = pool[block_table[b, j // page], j % page]
    return out
