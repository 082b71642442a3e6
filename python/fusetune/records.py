"""The records fusetune keeps, as plain dataclasses: what :mod:`fusetune.db` reads from a
database and :class:`fusetune.Client` receives from the service.

Fields are those of the C++ records (records/run.h, records/trial.h, db/store.h) and of the
proto (service/proto/fusetune.proto): times in microseconds (``_us``) or Unix milliseconds
(``_unix_ms``), keys the canonical strings.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from .problem import Config

__all__ = ["BestConfig", "BestConfigAnswer", "Trial", "SampleBlock", "DeviceState", "Regression", "Audit", "Job"]


@dataclasses.dataclass(frozen=True)
class BestConfig:
    """A database's best config of one problem on one device class."""
    device_class: str
    problem_key: str
    config_key: str
    median_us: float = 0.0
    p10_us: float = 0.0
    p90_us: float = 0.0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    speedup_vs_materialized: float = 0.0  # best fused / best materialized latency (0: unknown)
    speedup_vs_partial: float = 0.0
    best_materialized_us: float = 0.0
    best_partial_us: float = 0.0
    run_id: int = 0
    commit: str = ""
    updated_unix_ms: int = 0

    @property
    def config(self) -> Config:
        return Config.from_key(self.config_key)


@dataclasses.dataclass(frozen=True)
class BestConfigAnswer:
    """The service's answer for one problem (GetBestConfigResponse).

    ``provenance`` is ``"exact"`` (this problem was tuned on the device class), ``"nearest"``
    (the nearest tuned shape, ``source_problem_key``, at ``distance``) or ``"default"``.
    """
    config: Config
    provenance: str
    problem_key: str
    source_problem_key: str = ""
    distance: float = 0.0
    median_us: float = 0.0
    speedup_vs_materialized: float = 0.0
    run_id: int = 0
    commit: str = ""
    max_rel_error: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeviceState:
    known: bool = False
    sm_clock_mhz: int = 0
    power_mw: int = 0
    throttle_reasons: int = 0


@dataclasses.dataclass(frozen=True)
class SampleBlock:
    samples: int = 0
    median_us: float = 0.0
    before: DeviceState = DeviceState()
    after: DeviceState = DeviceState()
    unsteady: bool = False
    graphed: bool = False


@dataclasses.dataclass(frozen=True)
class Trial:
    trial_id: str
    run_id: int
    problem_key: str
    config_key: str
    attempt: int = 0
    stage: str = "screen"
    outcome: str = "ok"
    message: str = ""
    samples_us: Tuple[float, ...] = ()
    blocks: Tuple[SampleBlock, ...] = ()
    median_us: float = 0.0
    p10_us: float = 0.0
    p90_us: float = 0.0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    checked_elements: int = 0
    sm_clock_mhz: int = 0
    flops: float = 0.0
    created_unix_ms: int = 0
    wall_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Regression:
    commit: str
    baseline_commit: str
    device_class: str
    problem_key: str
    config_key: str
    metric: str
    ratio: float
    p_value: float
    verdict: str
    created_unix_ms: int = 0
    id: int = 0  # the database's row id (0 from the service)


@dataclasses.dataclass(frozen=True)
class Audit:
    audit_id: int
    run_id: int
    device_class: str
    problem_key: str
    recorded_config_key: str
    best_config_key: str
    recorded_us: float
    best_us: float
    regret: float
    regret_low: float
    regret_high: float
    rounds: int
    configs_measured: int
    configs_failed: int
    commit: str
    created_unix_ms: int = 0


@dataclasses.dataclass(frozen=True)
class Job:
    job_id: int
    kind: str
    state: str
    device_class: str
    commit: str = ""
    problem_keys: Tuple[str, ...] = ()
    leased_by: str = ""
    lease_expiry_unix_ms: int = 0
    attempts: int = 0
    run_id: int = 0
    error: str = ""
    created_unix_ms: int = 0
    finished_unix_ms: int = 0
    trials_recorded: int = 0
