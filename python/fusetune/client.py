"""Client: the tuning service (``fusetune serve``) over gRPC.

The stubs are generated from service/proto/fusetune.proto when the package is built
(``fusetune.proto``). Every call maps the service's status code to the exception of
:mod:`fusetune.errors` (``UNAVAILABLE`` -> :class:`fusetune.UnavailableError`, ...), with the
server's message and its machine-readable reason (``fusetune-error-reason``) when it sent one.

Thread-safety: a Client may be used from any number of threads (gRPC channels are).
"""

from __future__ import annotations

import threading
from typing import Iterable, List, Optional, Sequence, Union

import grpc

from .errors import FusetuneError, InvalidArgumentError, error_for_code
from .problem import Config, Problem
from .records import Audit, BestConfigAnswer, Job, Regression

try:
    from .proto import fusetune_pb2 as pb
    from .proto import fusetune_pb2_grpc as pb_grpc
except ImportError as e:
    raise ImportError("fusetune: this package was built without the service's gRPC stubs (a build with "
                      "FUSETUNE_WITH_SERVICE and grpc_python_plugin makes them): no Client") from e

__all__ = ["Client"]

_PROVENANCE = {pb.GetBestConfigResponse.EXACT: "exact", pb.GetBestConfigResponse.NEAREST: "nearest",
               pb.GetBestConfigResponse.DEFAULT: "default"}
_JOB_KINDS = {"tune": pb.JOB_KIND_TUNE, "audit": pb.JOB_KIND_AUDIT}
_JOB_KIND_NAMES = {v: k for k, v in _JOB_KINDS.items()}
# The codes that mean the service did not answer: the next address is tried.
_FAILOVER_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# The service's limit of problems per BatchGetBestConfig call.
MAX_BATCH = 1024


def _problem_message(p: Problem) -> "pb.Problem":
    return pb.Problem(kind=p.kind, batch=p.batch, q_heads=p.q_heads, kv_heads=p.kv_heads, q_len=p.q_len,
                      kv_len=p.kv_len, head_dim=p.head_dim, causal=bool(p.causal), dtype=p.dtype,
                      softmax_scale=p.softmax_scale, cu_seqlens_q=list(p.cu_seqlens_q),
                      cu_seqlens_k=list(p.cu_seqlens_k), kv_valid_lens=list(p.kv_valid_lens),
                      page_block_size=p.page_block_size, kv_pool_pages=p.kv_pool_pages,
                      block_table_width=p.block_table_width, shared_prefix_pages=p.shared_prefix_pages)


def _answer(r) -> BestConfigAnswer:
    return BestConfigAnswer(config=Config.from_key(r.config.key), provenance=_PROVENANCE.get(r.provenance, "unknown"),
                            problem_key=r.problem_key, source_problem_key=r.source_problem_key, distance=r.distance,
                            median_us=r.median_us, speedup_vs_materialized=r.speedup_vs_materialized, run_id=r.run_id,
                            commit=r.commit, max_rel_error=r.max_rel_error)


def _job(j) -> Job:
    return Job(job_id=j.job_id, kind=_JOB_KIND_NAMES.get(j.kind, "tune"), state=j.state, device_class=j.device_class,
               commit=j.commit, problem_keys=tuple(j.problem_keys), leased_by=j.leased_by,
               lease_expiry_unix_ms=j.lease_expiry_unix_ms, attempts=j.attempts, run_id=j.run_id, error=j.error,
               created_unix_ms=j.created_unix_ms, finished_unix_ms=j.finished_unix_ms,
               trials_recorded=j.trials_recorded)


def _error(e: grpc.RpcError) -> FusetuneError:
    """The fusetune exception of a failed call."""
    code = e.code() if hasattr(e, "code") else None
    number = code.value[0] if code is not None else 2
    reason = ""
    try:
        for key, value in e.trailing_metadata() or ():
            if key == "fusetune-error-reason":
                reason = value if isinstance(value, str) else value.decode()
    except Exception:  # noqa: BLE001 - a call without metadata
        pass
    details = e.details() if hasattr(e, "details") else str(e)
    return error_for_code(number, details or (code.name if code is not None else "unknown error"), reason)


class Client:
    """A connection to the tuning service.

    Args:
        target: ``"host:port"``, or several replicas of the service as ``"host:port,host:port"``:
            a call goes to the current one; when it does not answer (UNAVAILABLE,
            DEADLINE_EXCEEDED) the next becomes current, and a read is made again there (each
            address once); ``submit`` is not repeated (it may have been queued), it raises and
            the next call goes to the next address.
        token: sent as ``authorization: Bearer <token>`` (writes need it; reads too unless the
            server runs with ``--open-reads``).
        tls_ca: PEM root certificates (bytes, or a path to a PEM file): TLS when given,
            plaintext otherwise.
        timeout: seconds per call.
        reconnect_initial, reconnect_max: the bounds of the channel's reconnect backoff while
            the service is away (gRPC's own grows to 120 s), as the C++ client's.
        device_class: the device class of calls that name none (e.g.
            ``fusetune.device_class("cuda:0")``).
    """

    def __init__(self, target: str, *, token: Optional[str] = None, tls_ca: Union[bytes, str, None] = None,
                 timeout: float = 10.0, reconnect_initial: float = 0.1, reconnect_max: float = 10.0,
                 device_class: Optional[str] = None):
        addresses = [a.strip() for a in target.split(",")]
        for address in addresses:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise InvalidArgumentError(f"target: expected host:port[,host:port...], got {target!r}")
        self.target = target
        self.addresses = tuple(addresses)
        self.device_class = device_class
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        # gRPC adds up to 20 % jitter to its capped backoff: cap at 5/6 so it stays within the bound.
        max_ms = max(1, int(reconnect_max * 1000) * 5 // 6)
        initial_ms = min(max(1, int(reconnect_initial * 1000)), max_ms)
        options = [("grpc.initial_reconnect_backoff_ms", initial_ms), ("grpc.min_reconnect_backoff_ms", initial_ms),
                   ("grpc.max_reconnect_backoff_ms", max_ms)]
        credentials = None
        if tls_ca is not None:
            pem = tls_ca
            if isinstance(tls_ca, str):
                with open(tls_ca, "rb") as f:
                    pem = f.read()
            credentials = grpc.ssl_channel_credentials(root_certificates=pem)
        self._channels = [grpc.secure_channel(a, credentials, options) if credentials is not None
                          else grpc.insecure_channel(a, options) for a in addresses]
        self._stubs = [pb_grpc.TuningServiceStub(c) for c in self._channels]
        self._current = 0  # the address calls go to first; moves on when it is away
        self._lock = threading.Lock()

    @property
    def current_address(self) -> str:
        """The address the next call goes to first."""
        with self._lock:
            return self.addresses[self._current]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _class(self, device_class: Optional[str]) -> str:
        chosen = device_class or self.device_class
        if not chosen:
            raise InvalidArgumentError("device_class: required, here or on the Client (e.g. fusetune.device_class('cuda:0'))")
        return chosen

    def _call(self, method: str, request, timeout: Optional[float] = None, *, retry: bool = True):
        """Calls ``method`` (a TuningService RPC name) at the current address. When the service
        does not answer there (UNAVAILABLE, DEADLINE_EXCEEDED), the next address becomes current
        and, with ``retry`` (reads, which may safely run twice), the call is made there, each
        address at most once; the last failure is raised."""
        with self._lock:
            first = self._current
        attempts = len(self._stubs) if retry else 1
        for i in range(attempts):
            index = (first + i) % len(self._stubs)
            try:
                return getattr(self._stubs[index], method)(request, timeout=timeout or self._timeout,
                                                           metadata=self._metadata)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                if code not in _FAILOVER_CODES or len(self._stubs) == 1:
                    raise _error(e) from None
                with self._lock:
                    if self._current == index:
                        self._current = (index + 1) % len(self._stubs)
                if i == attempts - 1:
                    raise _error(e) from None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ best configs

    def best_config(self, problem: Problem, device_class: Optional[str] = None) -> BestConfigAnswer:
        """The service's best config for ``problem`` on ``device_class`` (default: the
        Client's): exact, nearest or default, with its provenance and distance."""
        request = pb.GetBestConfigRequest(problem=_problem_message(problem), device_class=self._class(device_class))
        return _answer(self._call("GetBestConfig", request))

    def best_configs(self, problems: Sequence[Problem],
                     device_class: Optional[str] = None) -> List[Union[BestConfigAnswer, FusetuneError]]:
        """One answer per problem, in order (batches of up to 1024 per call). A problem the
        service refuses gets the exception it would raise (not raised) in its place; a failed
        call raises."""
        device_class = self._class(device_class)
        out: List[Union[BestConfigAnswer, FusetuneError]] = []
        for start in range(0, len(problems), MAX_BATCH):
            chunk = problems[start:start + MAX_BATCH]
            request = pb.BatchGetBestConfigRequest(requests=[
                pb.GetBestConfigRequest(problem=_problem_message(p), device_class=device_class) for p in chunk])
            response = self._call("BatchGetBestConfig", request)
            for entry in response.entries:
                out.append(_answer(entry.response) if not entry.error else InvalidArgumentError(entry.error))
        return out

    def _fetch_for_cache(self, problems: Sequence[Problem], device_class: str):
        """ConfigCache's fetcher: best_configs as CachedConfig answers."""
        from .config_cache import CachedConfig
        return [a if isinstance(a, FusetuneError) else CachedConfig(a.config, a.provenance, a.median_us)
                for a in self.best_configs(problems, device_class)]

    # ------------------------------------------------------------ jobs

    def submit(self, problems: Iterable[Problem], device_class: Optional[str] = None, *, kind: str = "tune",
               commit: str = "",
               max_trials: int = 0, max_seconds: float = 0.0, variants: Sequence[str] = (),
               precisions: Sequence[str] = ()) -> int:
        """Queues a job (``kind`` ``"tune"`` or ``"audit"``) for workers of ``device_class``
        (default: the Client's); returns its id. Needs the token."""
        if kind not in _JOB_KINDS:
            raise InvalidArgumentError(f"kind: expected 'tune' or 'audit', got {kind!r}")
        request = pb.SubmitTuningJobRequest(problems=[_problem_message(p) for p in problems],
                                            device_class=self._class(device_class), commit=commit, max_trials=max_trials,
                                            max_seconds=max_seconds, variants=list(variants),
                                            precisions=list(precisions), kind=_JOB_KINDS[kind])
        return self._call("SubmitTuningJob", request, retry=False).job_id

    def job(self, job_id: int) -> Job:
        """One job, with its trial count; NotFoundError for an unknown id."""
        return _job(self._call("GetJob", pb.GetJobRequest(job_id=job_id)))

    def jobs(self, state: Optional[str] = None, limit: int = 100) -> List[Job]:
        """Jobs, newest first, optionally of one state (queued, leased, done, failed)."""
        return [_job(j) for j in self._call("ListJobs", pb.ListJobsRequest(state=state or "", limit=limit)).jobs]

    # ------------------------------------------------------------ results

    def regressions(self, commit: Optional[str] = None, limit: int = 100) -> List[Regression]:
        """Regression verdicts, newest first, optionally of one commit."""
        response = self._call("ListRegressions", pb.ListRegressionsRequest(commit=commit or "", limit=limit))
        return [Regression(commit=r.commit, baseline_commit=r.baseline_commit, device_class=r.device_class,
                           problem_key=r.problem_key, config_key=r.config_key, metric=r.metric, ratio=r.ratio,
                           p_value=r.p_value, verdict=r.verdict, created_unix_ms=r.created_unix_ms)
                for r in response.regressions]

    def audits(self, device_class: Optional[str] = None, problem_key: Optional[str] = None,
               limit: int = 100) -> List[Audit]:
        """Audits reported to the service, newest first."""
        response = self._call("ListAudits", pb.ListAuditsRequest(device_class=device_class or "",
                                                                          problem_key=problem_key or "", limit=limit))
        return [Audit(audit_id=a.audit_id, run_id=a.run_id, device_class=a.device_class, problem_key=a.problem_key,
                      recorded_config_key=a.recorded_config_key, best_config_key=a.best_config_key,
                      recorded_us=a.recorded_us, best_us=a.best_us, regret=a.regret, regret_low=a.regret_low,
                      regret_high=a.regret_high, rounds=a.rounds, configs_measured=a.configs_measured,
                      configs_failed=a.configs_failed, commit=a.commit, created_unix_ms=a.created_unix_ms)
                for a in response.audits]
