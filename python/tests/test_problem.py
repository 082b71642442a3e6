"""fusetune.Problem and fusetune.Config: keys and checks are the C ABI's (the C++ ones)."""

import pytest

import fusetune


def test_keys_are_the_cpp_keys():
    assert fusetune.Problem(batch=1, q_heads=12, q_len=2048, kv_len=2048, head_dim=64).key() == \
        "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"
    paged = fusetune.Problem(kind="decode", batch=3, q_heads=8, kv_heads=2, q_len=2, kv_len=70, head_dim=64,
                             page_block_size=16, kv_pool_pages=64, block_table_width=6, shared_prefix_pages=2)
    assert paged.key() == "decode/b3/hq8/hkv2/q2/k70/d64/causal0/fp32/page16/pool64/bt6/prefix2"
    varlen = fusetune.Problem(batch=2, q_heads=4, q_len=5, kv_len=9, head_dim=32, causal=True, dtype="bf16",
                              cu_seqlens_q=[0, 5, 8], cu_seqlens_k=[0, 9, 10])
    assert varlen.key().startswith("prefill/b2/hq4/hkv4/q5/k9/d32/causal1/bf16/varlen-")


def test_validation_is_the_c_abis_and_names_the_field():
    with pytest.raises(fusetune.InvalidArgumentError, match="kv_heads"):
        fusetune.Problem(batch=1, q_heads=12, kv_heads=5, q_len=8, kv_len=8).validate()
    with pytest.raises(fusetune.InvalidArgumentError, match="head_dim"):
        fusetune.Problem(q_len=8, kv_len=8, head_dim=20).key()
    with pytest.raises(fusetune.InvalidArgumentError, match="at most 16"):
        fusetune.Problem(kind="decode", q_len=17, kv_len=100).validate()
    with pytest.raises(fusetune.InvalidArgumentError, match="cu_seqlens_q"):
        fusetune.Problem(batch=2, q_len=5, kv_len=9, cu_seqlens_q=[0, 6, 5], cu_seqlens_k=[0, 9, 10]).validate()
    with pytest.raises(fusetune.InvalidArgumentError, match="dtype"):
        fusetune.Problem(q_len=8, kv_len=8, dtype="fp64").validate()
    fusetune.Problem(q_len=8, kv_len=8).validate()


def test_problems_are_values():
    a = fusetune.Problem(batch=2, q_heads=4, q_len=8, kv_len=8, kv_valid_lens=[8, 3])
    b = fusetune.Problem(batch=2, q_heads=4, kv_heads=4, q_len=8, kv_len=8, kv_valid_lens=(8, 3))
    assert a == b and hash(a) == hash(b)
    assert a.kv_heads == 4
    assert a.to_dict()["kv_valid_lens"] == [8, 3]


def test_config_keys_round_trip():
    for key in ("fused/bm64/bs32/t4/fp32/st2", "fused/bm16/bs64/t128/bf16/st2/skauto",
                "materialized/bm64/bs64/t256/fp16/st1"):
        assert fusetune.Config.from_key(key).key() == key
    c = fusetune.Config.from_key("fused/bm16/bs64/t128/bf16/st2/skauto")
    assert (c.variant, c.block_m, c.block_s, c.threads, c.precision, c.stages, c.split_kv) == \
        ("fused", 16, 64, 128, "bf16", 2, 0)
    with pytest.raises(fusetune.InvalidArgumentError):
        fusetune.Config.from_key("fused/bm64")
    with pytest.raises(fusetune.InvalidArgumentError):
        fusetune.Config(block_m=0).key()


def test_config_schedule_flags_round_trip():
    key = "fused/bm128/bs128/t384/bf16/st2/pingpong/persistent"
    c = fusetune.Config.from_key(key)
    assert (c.split_kv, c.pingpong, c.persistent) == (1, True, True)
    assert c.key() == key
    assert c == fusetune.Config(block_m=128, block_s=128, threads=384, precision="bf16", stages=2, pingpong=True,
                                persistent=True)
    assert fusetune.Config.from_key("fused/bm128/bs128/t384/bf16/st2/skauto/persistent") == \
        fusetune.Config(block_m=128, block_s=128, threads=384, precision="bf16", stages=2, split_kv=0, persistent=True)
    assert fusetune.Config(pingpong=True).key() == "fused/bm64/bs64/t1/fp32/st1/pingpong"
    plain = fusetune.Config.from_key("fused/bm64/bs64/t1/fp32/st1")
    assert (plain.pingpong, plain.persistent) == (False, False)
    for bad in ("fused/bm64/bs64/t1/fp32/st1/persistent/pingpong", "fused/bm64/bs64/t1/fp32/st1/pingpong/sk4"):
        with pytest.raises(fusetune.InvalidArgumentError):
            fusetune.Config.from_key(bad)
    with pytest.raises(fusetune.InvalidArgumentError):
        fusetune.Config(pingpong=2).key()


def test_tolerance_is_the_librarys_table():
    # kernels/reference.h: the larger of the products' precision and the output's rounding.
    assert fusetune.tolerance("fp32", "fp32") == 1e-4
    assert fusetune.tolerance("tf32", "fp32") == 5e-3
    assert fusetune.tolerance("fp16", "fp16") == 1e-2
    assert fusetune.tolerance("bf16", "bf16") == 3e-2
    assert fusetune.tolerance("fp32", "bf16") == 1.6e-2
    with pytest.raises(fusetune.InvalidArgumentError):
        fusetune.tolerance("fp8", "fp32")


def test_seed_problems_are_the_seed_preset():
    keys = [p.key() for p in fusetune.seed_problems()]
    assert keys == [f"prefill/b1/hq12/hkv12/q{s}/k{s}/d64/causal0/fp32" for s in (128, 256, 512, 1024, 2048)]
