"""open_db: a fusetune database, read-only.

The database is read through the C ABI (``fusetune_db_*``), that is by the Store of db/ opened
as ``fusetune report`` opens it: the file is never created, upgraded or changed; it may sit
where this process cannot write (a read-only mount, another user's directory); a missing file
is :class:`fusetune.NotFoundError`, a schema other than this build's
:class:`fusetune.FailedPreconditionError`, with the Store's messages (which name the file and
say what to do).

Rows come back as the dataclasses of :mod:`fusetune.records`, or as a pandas DataFrame with
``frame=True`` when pandas is installed.

Thread-safety: a Database may be read from several threads (its calls are serialised).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
from typing import Optional

from . import _capi
from .errors import InvalidArgumentError
from .records import Audit, BestConfig, DeviceState, Regression, SampleBlock, Trial

__all__ = ["open_db", "Database"]


def _number(x):
    """A JSON number of the C ABI: a number, or "nan" / "inf" / "-inf"."""
    return float(x)


def _best_config(r: dict) -> BestConfig:
    return BestConfig(device_class=r["device_class"], problem_key=r["problem_key"], config_key=r["config_key"],
                      median_us=_number(r["median_us"]), p10_us=_number(r["p10_us"]), p90_us=_number(r["p90_us"]),
                      max_abs_error=_number(r["max_abs_error"]), max_rel_error=_number(r["max_rel_error"]),
                      speedup_vs_materialized=_number(r["speedup_vs_materialized"]),
                      speedup_vs_partial=_number(r["speedup_vs_partial"]),
                      best_materialized_us=_number(r["best_materialized_us"]),
                      best_partial_us=_number(r["best_partial_us"]), run_id=r["run_id"], commit=r["commit"],
                      updated_unix_ms=r["updated_unix_ms"])


def _state(d: dict) -> DeviceState:
    return DeviceState(known=d["known"], sm_clock_mhz=d["sm_clock_mhz"], power_mw=d["power_mw"],
                       throttle_reasons=d["throttle_reasons"])


def _trial(r: dict) -> Trial:
    blocks = tuple(SampleBlock(samples=b["samples"], median_us=_number(b["median_us"]), before=_state(b["before"]),
                               after=_state(b["after"]), unsteady=b["unsteady"],
                               graphed=b.get("graphed", False)) for b in r["blocks"])
    return Trial(trial_id=r["trial_id"], run_id=r["run_id"], problem_key=r["problem_key"], config_key=r["config_key"],
                 attempt=r["attempt"], stage=r["stage"], outcome=r["outcome"], message=r["message"],
                 samples_us=tuple(_number(x) for x in r["samples_us"]), blocks=blocks,
                 median_us=_number(r["median_us"]), p10_us=_number(r["p10_us"]), p90_us=_number(r["p90_us"]),
                 max_abs_error=_number(r["max_abs_error"]), max_rel_error=_number(r["max_rel_error"]),
                 checked_elements=r["checked_elements"], sm_clock_mhz=r["sm_clock_mhz"], flops=_number(r["flops"]),
                 created_unix_ms=r["created_unix_ms"], wall_seconds=_number(r["wall_seconds"]))


def _regression(r: dict) -> Regression:
    return Regression(commit=r["commit"], baseline_commit=r["baseline_commit"], device_class=r["device_class"],
                      problem_key=r["problem_key"], config_key=r["config_key"], metric=r["metric"],
                      ratio=_number(r["ratio"]), p_value=_number(r["p_value"]), verdict=r["verdict"],
                      created_unix_ms=r["created_unix_ms"], id=r["id"])


def _audit(r: dict) -> Audit:
    return Audit(audit_id=r["audit_id"], run_id=r["run_id"], device_class=r["device_class"],
                 problem_key=r["problem_key"], recorded_config_key=r["recorded_config_key"],
                 best_config_key=r["best_config_key"], recorded_us=_number(r["recorded_us"]),
                 best_us=_number(r["best_us"]), regret=_number(r["regret"]), regret_low=_number(r["regret_low"]),
                 regret_high=_number(r["regret_high"]), rounds=r["rounds"], configs_measured=r["configs_measured"],
                 configs_failed=r["configs_failed"], commit=r["commit"], created_unix_ms=r["created_unix_ms"])


def _text(s: Optional[str]):
    return s.encode() if s else None


def _frame(rows: list):
    try:
        import pandas
    except ImportError:
        raise ImportError("frame=True needs pandas (Debian: python3-pandas)") from None
    return pandas.DataFrame([dataclasses.asdict(r) for r in rows])


class Database:
    """A fusetune database opened read-only; see :func:`open_db`."""

    def __init__(self, path: str):
        self.path = path
        self._handle = None
        handle = ctypes.c_void_p()
        err = _capi.error_buffer()
        _capi.check(_capi.db_open(os.fsencode(path), ctypes.byref(handle), err, len(err)), err)
        self._handle = handle.value

    def close(self) -> None:
        if self._handle:
            _capi.db_close(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _read(self, function, *args) -> list:
        if not self._handle:
            raise InvalidArgumentError(f"database {self.path} is closed")
        text = ctypes.c_void_p()
        err = _capi.error_buffer()
        _capi.check(function(self._handle, *args, ctypes.byref(text), err, len(err)), err)
        return json.loads(_capi.take_text(text))

    def best_configs(self, device_class: Optional[str] = None, *, frame: bool = False):
        """The best configs, by device class and problem key (of one device class when given)."""
        rows = [_best_config(r) for r in self._read(_capi.db_best_configs, _text(device_class))]
        return _frame(rows) if frame else rows

    def trials(self, run_id: int = 0, *, problem_key: Optional[str] = None, device_class: Optional[str] = None,
               limit: int = 1000, frame: bool = False):
        """The trials of run ``run_id`` (of ``problem_key`` only when given), in the order they
        were recorded; or, without a run, the newest ``limit`` trials of ``problem_key`` on
        ``device_class`` across runs."""
        rows = [_trial(r) for r in self._read(_capi.db_trials, run_id, _text(device_class), _text(problem_key), limit)]
        return _frame(rows) if frame else rows

    def regressions(self, commit: Optional[str] = None, *, limit: int = 1000, frame: bool = False):
        """Regression verdicts, newest first (of one commit when given)."""
        rows = [_regression(r) for r in self._read(_capi.db_regressions, _text(commit), limit)]
        return _frame(rows) if frame else rows

    def audits(self, device_class: Optional[str] = None, problem_key: Optional[str] = None, *, limit: int = 1000,
               frame: bool = False):
        """Audits, newest first."""
        rows = [_audit(r) for r in self._read(_capi.db_audits, _text(device_class), _text(problem_key), limit)]
        return _frame(rows) if frame else rows


def open_db(path) -> Database:
    """Opens the fusetune database at ``path`` for reading (never creates or changes it)."""
    return Database(os.fspath(path))
