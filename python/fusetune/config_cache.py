"""ConfigCache: the best kernel config for a problem, answered without waiting on the network.

The Python twin of the C++ ``fusetune::ConfigCache`` (service/client/include/fusetune/client/
config_cache.h), with the same rules:

* :meth:`ConfigCache.lookup` answers from memory. A problem not in memory is answered from the
  snapshot file, if one is configured and holds it, else with the default config of the device
  class's backend (the C ABI's ``fusetune_default_config``: the service's DEFAULT answer and the
  C++ cache's fallback, provenance ``"fallback"``) — at once either way — and is queued.
* A background thread fetches queued problems from the service in batches of up to
  ``max_batch`` (``BatchGetBestConfig``) after gathering them for ``batch_window``, and
  publishes the answers; later lookups of those problems hit. Entries are fetched again once
  older than ``ttl``. A problem the service refuses is kept as the fallback until the TTL.
* While the service is unreachable, lookups keep answering with what the cache has (entries of
  earlier fetches, the snapshot, the default), and fetches are retried with a capped,
  jittered backoff from ``retry_initial`` doubling to ``retry_max`` (each delay drawn in
  [1/2, 1] of that), as ``fusetune::Backoff``.
* Answers are per device class (``"cuda/NVIDIA-H200/sm90"``): one cache serves any number.

The snapshot file (``snapshot=PATH``) is what the Python cache adds: every answer the service
gave is written there (JSON, replaced atomically after each fetch), and a new process answers
from it before the service has answered, e.g. while the service is down at start-up.

Without ``server`` the cache fetches nothing: memory, then the snapshot, then the default.

Thread-safety: every method may be called from any thread. A hit reads one dict (no lock).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import random
import tempfile
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _capi
from .errors import FusetuneError
from .problem import Config, Problem

__all__ = ["CachedConfig", "ConfigCache", "ConfigCacheStats", "default_config_cache", "set_default_config_cache"]

_log = logging.getLogger("fusetune")

SNAPSHOT_FORMAT = "fusetune-config-snapshot"
SNAPSHOT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CachedConfig:
    """A lookup's answer.

    Attributes:
        config: the config to run.
        provenance: the service's ``"exact"``, ``"nearest"`` or ``"default"``, or ``"fallback"``
            when the answer is the cache's own default (nothing known yet, or refused).
        median_us: measured latency on the source problem (0 when unknown).
        from_snapshot: True when the answer comes from the snapshot file and the service has not
            answered for this problem in this process yet.
    """

    config: Config
    provenance: str = "fallback"
    median_us: float = 0.0
    from_snapshot: bool = False


@dataclasses.dataclass
class ConfigCacheStats:
    misses: int = 0            # lookups of problems not in memory (answered from the snapshot or the default)
    snapshot_hits: int = 0     # of those, answered from the snapshot file
    entries: int = 0           # problems in memory (any provenance)
    pending: int = 0           # problems queued for a fetch
    fetches_ok: int = 0        # fetch calls that succeeded
    fetches_failed: int = 0    # fetch calls that failed (service unreachable, deadline, ...)
    snapshots_written: int = 0


# fetcher(problems, device_class) -> one answer per problem: a CachedConfig, or a FusetuneError
# for a problem the service refused. Raising means "the whole call failed; try again later".
Fetcher = Callable[[Sequence[Problem], str], List[object]]


class ConfigCache:
    """See the module's documentation.

    Args:
        server: ``"host:port"`` of the tuning service; None: no fetching.
        token, tls_ca: as :class:`fusetune.Client`.
        snapshot: path of the snapshot file (read at start, written after each fetch); None: none.
        ttl: seconds before an entry is fetched again.
        batch_window: seconds to gather misses before a fetch.
        max_batch: problems per fetch (the service takes up to 1024).
        max_entries: beyond this many problems in memory, misses are answered but not kept.
        retry_initial, retry_max: the backoff while the service is unreachable, seconds.
        deadline: seconds per fetch call.
        fetcher: replaces the gRPC fetch (tests); see ``Fetcher``.
    """

    def __init__(self, server: Optional[str] = None, *, token: Optional[str] = None, tls_ca=None,
                 snapshot: Optional[str] = None, ttl: float = 300.0, batch_window: float = 0.002,
                 max_batch: int = 1024, max_entries: int = 1 << 16, retry_initial: float = 0.1,
                 retry_max: float = 10.0, deadline: float = 2.0, fetcher: Optional[Fetcher] = None):
        self._ttl = ttl
        self._batch_window = batch_window
        self._max_batch = max_batch
        self._max_entries = max_entries
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._snapshot_path = snapshot
        # Memory: (device class, problem fields) -> CachedConfig. Read without a lock; written by
        # whole-item assignment, which readers see atomically.
        self._entries: Dict[Tuple[str, tuple], CachedConfig] = {}
        self._mu = threading.Condition()
        self._pending: Dict[Tuple[str, tuple], Tuple[str, Problem]] = {}
        self._fetched_at: Dict[Tuple[str, tuple], Tuple[float, str, Problem]] = {}
        self._stats = ConfigCacheStats()
        self._stop = False
        self._in_flight = False
        self._next_expiry = float("inf")  # earliest time an entry's TTL runs out (monotonic)
        self._retry_after = 0.0
        self._delay = retry_initial
        # The snapshot: (device class, problem key) -> record, as read and as fetched since.
        self._snapshot: Dict[Tuple[str, str], dict] = self._read_snapshot() if snapshot else {}
        self._client = None
        if fetcher is None and server is not None:
            from .client import Client  # gRPC is loaded only for a cache that fetches
            self._client = Client(server, token=token, tls_ca=tls_ca, timeout=deadline,
                                  reconnect_initial=retry_initial, reconnect_max=retry_max)
            fetcher = self._client._fetch_for_cache
        self._fetcher = fetcher
        self._thread = None
        if fetcher is not None:
            self._thread = threading.Thread(target=self._fetch_loop, name="fusetune-config-cache", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------ lookups

    def lookup(self, problem: Problem, device_class: str) -> CachedConfig:
        """The config for ``problem`` on ``device_class``; never waits on the network.
        InvalidArgumentError for an invalid problem (it has no key and no default)."""
        hit = self._entries.get((device_class, problem._cache_key))
        if hit is not None:
            return hit
        return self._miss(problem, device_class)

    def _miss(self, problem: Problem, device_class: str) -> CachedConfig:
        key = (device_class, problem._cache_key)
        record = self._snapshot.get((device_class, problem.key())) if self._snapshot else None
        answer = None
        if record is not None:
            try:
                answer = CachedConfig(Config.from_key(record["config_key"]), record.get("provenance", "default"),
                                      float(record.get("median_us", 0.0)), from_snapshot=True)
            except (FusetuneError, KeyError, TypeError, ValueError):
                answer = None  # a record this build cannot read: as if absent
        if answer is None:
            answer = CachedConfig(default_config(problem, device_class))
        with self._mu:
            self._stats.misses += 1
            if answer.from_snapshot:
                self._stats.snapshot_hits += 1
            if len(self._entries) < self._max_entries:
                self._entries[key] = answer
                if self._fetcher is not None and key not in self._fetched_at:
                    self._pending[key] = (device_class, problem)
                    self._mu.notify()
        return answer

    def prefetch(self, problems: Iterable[Problem], device_class: str) -> None:
        """Queues problems for fetching without looking them up (e.g. at model load)."""
        if self._fetcher is None:
            return
        with self._mu:
            for p in problems:
                self._pending[(device_class, p._cache_key)] = (device_class, p)
            self._mu.notify()

    def flush(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds until nothing is queued and no fetch is in flight
        (True when so). For start-up, tests and examples; not for the hot path."""
        deadline = time.monotonic() + timeout
        with self._mu:
            self._retry_after = 0.0  # do not sit out a backoff while someone waits
            self._mu.notify()
            while self._pending or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._mu.wait(min(left, 0.05))
            return True

    def stats(self) -> ConfigCacheStats:
        with self._mu:
            s = dataclasses.replace(self._stats)
            s.entries = len(self._entries)
            s.pending = len(self._pending)
            return s

    def close(self) -> None:
        """Stops the fetch thread (a fetch in flight ends at its deadline); lookups keep working."""
        with self._mu:
            self._stop = True
            self._mu.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self._client is not None:
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ the fetch thread

    def _fetch_loop(self) -> None:
        while True:
            with self._mu:
                while not self._stop:
                    now = time.monotonic()
                    self._queue_expired(now)
                    if self._pending and now >= self._retry_after:
                        break
                    wait = self._retry_after - now if self._pending else self._next_expiry - now
                    self._mu.wait(max(0.001, min(wait, 3600.0)))  # lookups, flush and close notify
                if self._stop:
                    return
            time.sleep(self._batch_window)  # gather the misses arriving together
            with self._mu:
                batch = []
                for key in list(self._pending)[: self._max_batch]:
                    batch.append((key, self._pending.pop(key)))
                self._in_flight = bool(batch)
            if not batch:
                continue
            ok = self._fetch_and_publish(batch)
            with self._mu:
                self._in_flight = False
                if ok:
                    self._stats.fetches_ok += 1
                    self._delay = self._retry_initial
                else:
                    self._stats.fetches_failed += 1
                    for key, item in batch:
                        self._pending.setdefault(key, item)
                    self._retry_after = time.monotonic() + self._delay * random.uniform(0.5, 1.0)
                    self._delay = min(self._delay * 2, self._retry_max)
                self._mu.notify_all()

    def _queue_expired(self, now: float) -> None:
        """Queues the entries older than the TTL (a scan only once the earliest has expired)."""
        if now < self._next_expiry:
            return
        self._next_expiry = float("inf")
        for key, (at, device_class, problem) in self._fetched_at.items():
            if now - at >= self._ttl:
                if key not in self._pending:
                    self._pending[key] = (device_class, problem)
            else:
                self._next_expiry = min(self._next_expiry, at + self._ttl)

    def _fetch_and_publish(self, batch) -> bool:
        by_class: Dict[str, list] = {}
        for key, (device_class, problem) in batch:
            by_class.setdefault(device_class, []).append((key, problem))
        answers = []
        try:
            for device_class, items in by_class.items():
                results = self._fetcher([p for _, p in items], device_class)
                if len(results) != len(items):
                    raise FusetuneError(f"the fetcher answered {len(results)} of {len(items)} problems")
                answers.extend(zip(items, [device_class] * len(items), results))
        except Exception as e:  # noqa: BLE001 - any failure of the call means "try again later"
            _log.debug("fusetune: config fetch failed: %s", e)
            return False
        now = time.monotonic()
        wall_ms = int(time.time() * 1000)
        with self._mu:
            for (key, problem), device_class, result in answers:
                if isinstance(result, CachedConfig):
                    answer = result
                    self._snapshot[(device_class, problem.key())] = {
                        "device_class": device_class, "problem_key": problem.key(), "config_key": result.config.key(),
                        "provenance": result.provenance, "median_us": result.median_us, "fetched_unix_ms": wall_ms}
                else:  # refused: the default until the TTL says ask again
                    answer = CachedConfig(default_config(problem, device_class))
                self._entries[key] = answer
                self._fetched_at[key] = (now, device_class, problem)
            self._next_expiry = min(self._next_expiry, now + self._ttl)
        if self._snapshot_path:
            self._write_snapshot()
        return True

    # ------------------------------------------------------------ the snapshot file

    def _read_snapshot(self) -> Dict[Tuple[str, str], dict]:
        try:
            with open(self._snapshot_path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            _log.warning("fusetune: ignoring the config snapshot %s: %s", self._snapshot_path, e)
            return {}
        if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT or data.get("version") != SNAPSHOT_VERSION:
            _log.warning("fusetune: ignoring %s: not a version-%d config snapshot", self._snapshot_path,
                         SNAPSHOT_VERSION)
            return {}
        out = {}
        for record in data.get("entries", []):
            if isinstance(record, dict) and "device_class" in record and "problem_key" in record:
                out[(record["device_class"], record["problem_key"])] = record
        return out

    def _write_snapshot(self) -> None:
        with self._mu:
            entries = sorted(self._snapshot.values(), key=lambda r: (r["device_class"], r["problem_key"]))
        data = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION, "entries": entries}
        directory = os.path.dirname(os.path.abspath(self._snapshot_path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=".fusetune-snapshot-", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self._snapshot_path)
        except OSError as e:
            _log.warning("fusetune: cannot write the config snapshot %s: %s", self._snapshot_path, e)
            return
        with self._mu:
            self._stats.snapshots_written += 1


def default_config(problem: Problem, device_class: str) -> Config:
    """The default config of ``device_class``'s backend for ``problem`` (the C ABI's
    ``fusetune_default_config``); InvalidArgumentError for an invalid problem."""
    problem_struct, cache_struct = problem._structs()[:2]
    out = _capi.ConfigStruct()
    err = _capi.error_buffer()
    _capi.check(_capi.default_config(device_class.encode(), ctypes.byref(problem_struct), ctypes.byref(cache_struct),
                                     ctypes.byref(out), err, len(err)), err)
    return Config._from_struct(out)


_default_cache: Optional[ConfigCache] = None
_default_lock = threading.Lock()


def default_config_cache() -> ConfigCache:
    """The cache :func:`fusetune.attention` asks when no config is given. Made on first use from
    the environment: ``FUSETUNE_SERVER`` (host:port; unset: no fetching), ``FUSETUNE_TOKEN`` or
    ``FUSETUNE_TOKEN_FILE``, ``FUSETUNE_TLS_CA`` (a PEM file), ``FUSETUNE_CONFIG_SNAPSHOT`` (the
    snapshot file). Replace it with :func:`set_default_config_cache`."""
    cache = _default_cache
    if cache is not None:
        return cache
    return _make_default_cache()


def _make_default_cache() -> ConfigCache:
    global _default_cache
    with _default_lock:
        if _default_cache is None:
            token = os.environ.get("FUSETUNE_TOKEN")
            token_file = os.environ.get("FUSETUNE_TOKEN_FILE")
            if not token and token_file:
                with open(token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            _default_cache = ConfigCache(os.environ.get("FUSETUNE_SERVER") or None, token=token or None,
                                         tls_ca=os.environ.get("FUSETUNE_TLS_CA") or None,
                                         snapshot=os.environ.get("FUSETUNE_CONFIG_SNAPSHOT") or None)
        return _default_cache


def set_default_config_cache(cache: Optional[ConfigCache]) -> Optional[ConfigCache]:
    """Makes ``cache`` the one :func:`fusetune.attention` asks (None: made again from the
    environment at next use); returns the previous one, which the caller may close."""
    global _default_cache
    with _default_lock:
        previous, _default_cache = _default_cache, cache
    return previous
