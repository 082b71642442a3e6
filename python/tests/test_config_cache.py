"""fusetune.ConfigCache with fetchers of the test's own: memory, then the snapshot file, then
the backend's default; answers per device class; refreshes; failures; attention's default."""

import json
import threading
import time

import pytest

import fusetune
from fusetune.config_cache import CachedConfig

CPU = "cpu/Test-CPU/x86_64"
GPU = "cuda/NVIDIA-H200/sm90"
PROBLEM = fusetune.Problem(batch=1, q_heads=2, q_len=64, kv_len=64, head_dim=32)
TUNED = fusetune.Config.from_key("fused/bm16/bs16/t1/fp32/st1")


class Fetcher:
    """Answers TUNED for every problem, or raises while `failing`; counts its calls."""

    def __init__(self, answer=TUNED, provenance="exact"):
        self.answer = answer
        self.provenance = provenance
        self.calls = []
        self.failing = False

    def __call__(self, problems, device_class):
        self.calls.append((device_class, [p.key() for p in problems]))
        if self.failing:
            raise fusetune.UnavailableError("the service is away")
        return [CachedConfig(self.answer, self.provenance, 12.5) for _ in problems]


def eventually(condition, what, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_miss_is_the_backends_default_then_the_fetched_answer():
    fetcher = Fetcher()
    with fusetune.ConfigCache(fetcher=fetcher) as cache:
        first = cache.lookup(PROBLEM, CPU)
        assert first.provenance == "fallback"
        assert first.config.key() == "fused/bm64/bs64/t1/fp32/st1"  # DefaultConfig("cpu", ...)
        assert cache.flush(30)
        hit = cache.lookup(PROBLEM, CPU)
        assert (hit.config, hit.provenance, hit.median_us, hit.from_snapshot) == (TUNED, "exact", 12.5, False)
        assert fetcher.calls == [(CPU, [PROBLEM.key()])]
        stats = cache.stats()
        assert (stats.misses, stats.entries, stats.fetches_ok) == (1, 1, 1)


def test_answers_are_per_device_class():
    with fusetune.ConfigCache() as cache:  # no server: defaults only
        half = fusetune.Problem(batch=1, q_heads=2, q_len=64, kv_len=64, head_dim=128, dtype="bf16")
        assert cache.lookup(half, GPU).config.key() == "fused/bm64/bs64/t128/bf16/st2"
        assert cache.lookup(half, CPU).config.key() == "fused/bm64/bs64/t1/fp32/st1"
        decode = fusetune.Problem(kind="decode", batch=16, q_heads=32, kv_heads=8, q_len=1, kv_len=8192,
                                  head_dim=128, dtype="bf16")
        assert cache.lookup(decode, GPU).config.key() == "fused/bm16/bs64/t128/bf16/st2/skauto"


def test_the_snapshot_answers_a_new_cache_before_the_service_does(tmp_path):
    snapshot = str(tmp_path / "configs.json")
    with fusetune.ConfigCache(fetcher=Fetcher(), snapshot=snapshot) as cache:
        cache.lookup(PROBLEM, CPU)
        assert cache.flush(30)
        assert cache.stats().snapshots_written >= 1
    data = json.load(open(snapshot))
    assert data["entries"][0]["problem_key"] == PROBLEM.key()
    assert data["entries"][0]["config_key"] == TUNED.key()

    # A new process whose service is away: the snapshot answers, and the default for the rest.
    away = Fetcher()
    away.failing = True
    with fusetune.ConfigCache(fetcher=away, snapshot=snapshot, retry_initial=0.01, retry_max=0.05) as cache:
        hit = cache.lookup(PROBLEM, CPU)
        assert (hit.config, hit.provenance, hit.from_snapshot) == (TUNED, "exact", True)
        other = fusetune.Problem(batch=1, q_heads=2, q_len=128, kv_len=128, head_dim=32)
        assert cache.lookup(other, CPU).provenance == "fallback"
        assert cache.lookup(PROBLEM, GPU).provenance == "fallback"  # another class's entry
        eventually(lambda: cache.stats().fetches_failed >= 2, "retried fetches")
        assert cache.lookup(PROBLEM, CPU).config == TUNED
        away.failing = False
        assert cache.flush(30)
        assert not cache.lookup(PROBLEM, CPU).from_snapshot


def test_an_unreadable_snapshot_is_ignored(tmp_path):
    snapshot = tmp_path / "configs.json"
    snapshot.write_text("{not json")
    with fusetune.ConfigCache(snapshot=str(snapshot)) as cache:
        assert cache.lookup(PROBLEM, CPU).provenance == "fallback"


def test_a_lookup_never_waits_for_a_fetch():
    release = threading.Event()
    started = threading.Event()

    def stuck(problems, device_class):
        started.set()
        release.wait()
        return [CachedConfig(TUNED, "exact") for _ in problems]

    cache = fusetune.ConfigCache(fetcher=stuck)
    try:
        cache.lookup(PROBLEM, CPU)
        assert started.wait(30)
        # The fetch is stuck in the network: lookups, old and new, still answer.
        assert cache.lookup(PROBLEM, CPU).provenance == "fallback"
        other = fusetune.Problem(batch=2, q_heads=2, q_len=64, kv_len=64, head_dim=32)
        assert cache.lookup(other, CPU).provenance == "fallback"
    finally:
        release.set()
        cache.close()


def test_a_refused_problem_stays_the_default():
    def refuse(problems, device_class):
        return [fusetune.InvalidArgumentError("no such shape") for _ in problems]

    with fusetune.ConfigCache(fetcher=refuse) as cache:
        cache.lookup(PROBLEM, CPU)
        assert cache.flush(30)
        assert cache.lookup(PROBLEM, CPU).provenance == "fallback"


def test_entries_are_fetched_again_after_the_ttl():
    fetcher = Fetcher()
    with fusetune.ConfigCache(fetcher=fetcher, ttl=0.05) as cache:
        cache.lookup(PROBLEM, CPU)
        eventually(lambda: len(fetcher.calls) >= 3, "refetches after the TTL")
        fetcher.answer = fusetune.Config.from_key("fused/bm32/bs32/t1/fp32/st1")
        eventually(lambda: cache.lookup(PROBLEM, CPU).config == fetcher.answer, "the new answer published")


def test_attention_runs_the_default_caches_answer():
    torch = pytest.importorskip("torch")
    q = torch.rand(1, 8, 2, 32)
    fetcher = Fetcher(answer=fusetune.Config.from_key("fused/bm16/bs16/t1024/fp32/st1"))  # no CPU runs it
    cache = fusetune.ConfigCache(fetcher=fetcher)
    previous = fusetune.set_default_config_cache(cache)
    try:
        fusetune.attention(q, q, q)  # the default config, while the answer is on its way
        assert cache.flush(30)
        with pytest.raises(fusetune.UnimplementedError, match="threads"):
            fusetune.attention(q, q, q)
        assert fetcher.calls[0] == (fusetune.device_class(), [
            fusetune.Problem(batch=1, q_heads=2, q_len=8, kv_len=8, head_dim=32).key()])
    finally:
        fusetune.set_default_config_cache(previous)
        cache.close()
