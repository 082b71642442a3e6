"""ctypes bindings of the C ABI (``fusetune/c_api.h``, ``libfusetune_capi.so``).

The library sits beside this file (the build and ``cmake --install`` put it there);
``FUSETUNE_CAPI_LIBRARY`` names another one. Everything else in the package reaches the
library through this module: the structs, the signatures, and :func:`check`, which turns a
status code and its message into an exception of :mod:`fusetune.errors`.
"""

from __future__ import annotations

import ctypes
import os

from . import _build
from .errors import error_for_code

# FUSETUNE_C_API_VERSION this module was written against; the library must say the same.
API_VERSION = 2

# Status codes (fusetune_status).
OK = 0

# Enum values (c_api.h).
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2}
VARIANTS = {"fused": 0, "partial": 1, "materialized": 2}
PRECISIONS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}


class ProblemStruct(ctypes.Structure):
    """fusetune_problem."""
    _fields_ = [
        ("batch", ctypes.c_int32), ("q_heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32),
        ("q_len", ctypes.c_int32), ("kv_len", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("causal", ctypes.c_int32), ("dtype", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("kv_valid_lens", ctypes.c_void_p),
    ]


class ConfigStruct(ctypes.Structure):
    """fusetune_config."""
    _fields_ = [
        ("variant", ctypes.c_int32), ("block_m", ctypes.c_int32), ("block_s", ctypes.c_int32),
        ("threads", ctypes.c_int32), ("precision", ctypes.c_int32), ("stages", ctypes.c_int32),
        ("split_kv", ctypes.c_int32), ("pingpong", ctypes.c_int32), ("persistent", ctypes.c_int32),
    ]


class KvCacheStruct(ctypes.Structure):
    """fusetune_kv_cache."""
    _fields_ = [
        ("decode", ctypes.c_int32), ("page_block_size", ctypes.c_int32), ("pool_pages", ctypes.c_int32),
        ("block_table_width", ctypes.c_int32), ("shared_prefix_pages", ctypes.c_int32),
        ("block_table", ctypes.c_void_p),
    ]


class LaunchStruct(ctypes.Structure):
    """fusetune_launch."""
    _fields_ = [
        ("stream", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("kv_valid_lens", ctypes.c_void_p),
    ]


def _library_path() -> str:
    override = os.environ.get("FUSETUNE_CAPI_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _build.CAPI_LIBRARY)


def _load() -> ctypes.CDLL:
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"fusetune: cannot load the C ABI library {path}: {e} (build it with the project's CMake build, "
            "or name one with FUSETUNE_CAPI_LIBRARY)") from e
    lib.fusetune_api_version.restype = ctypes.c_int
    lib.fusetune_api_version.argtypes = []
    version = lib.fusetune_api_version()
    if version != API_VERSION:
        raise ImportError(f"fusetune: {path} has C ABI version {version}; this package needs {API_VERSION}")
    return lib


lib = _load()

_P = ctypes.POINTER
_charp = ctypes.c_char_p
_size = ctypes.c_size_t
_int = ctypes.c_int
_vp = ctypes.c_void_p


def _sig(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


status_name = _sig("fusetune_status_name", _charp, _int)
create = _sig("fusetune_create", _int, _charp, _int, _P(_vp), _charp, _size)
destroy = _sig("fusetune_destroy", None, _vp)
describe = _sig("fusetune_describe", _int, _vp, _charp, _size)
device_class = _sig("fusetune_device_class", _int, _vp, _charp, _size)
config_from_key = _sig("fusetune_config_from_key", _int, _charp, _P(ConfigStruct), _charp, _size)
config_key = _sig("fusetune_config_key", _int, _P(ConfigStruct), _charp, _size, _charp, _size)
problem_validate = _sig("fusetune_problem_validate", _int, _P(ProblemStruct), _P(KvCacheStruct), _charp, _size)
problem_key = _sig("fusetune_problem_key", _int, _P(ProblemStruct), _P(KvCacheStruct), _charp, _size, _charp, _size)
default_config = _sig("fusetune_default_config", _int, _charp, _P(ProblemStruct), _P(KvCacheStruct),
                      _P(ConfigStruct), _charp, _size)
tolerance = _sig("fusetune_tolerance", _int, _int, _int, _P(ctypes.c_double))
seed_problems = _sig("fusetune_seed_problems", _int, _P(ProblemStruct), _size, _P(_size))
can_implement_kv_cache = _sig("fusetune_can_implement_kv_cache", _int, _vp, _P(ProblemStruct), _P(KvCacheStruct),
                              _P(ConfigStruct), _charp, _size)
# Tensor and stream pointers go as plain ints (c_void_p converts them).
run_on_stream = _sig("fusetune_run_on_stream", _int, _vp, _P(ProblemStruct), _P(KvCacheStruct), _P(ConfigStruct),
                     _vp, _vp, _vp, _vp, _P(LaunchStruct), _charp, _size)

db_open = _sig("fusetune_db_open", _int, _charp, _P(_vp), _charp, _size)
db_close = _sig("fusetune_db_close", None, _vp)
# JSON text comes back as a char* the library allocated: kept as c_void_p so it can be freed.
db_best_configs = _sig("fusetune_db_best_configs", _int, _vp, _charp, _P(_vp), _charp, _size)
db_trials = _sig("fusetune_db_trials", _int, _vp, ctypes.c_int64, _charp, _charp, _int, _P(_vp), _charp, _size)
db_regressions = _sig("fusetune_db_regressions", _int, _vp, _charp, _int, _P(_vp), _charp, _size)
db_audits = _sig("fusetune_db_audits", _int, _vp, _charp, _charp, _int, _P(_vp), _charp, _size)
free_text = _sig("fusetune_free_text", None, _vp)

ERROR_BYTES = 1024
KEY_BYTES = 512


def check(rc: int, err) -> None:
    """Raises the exception of status ``rc`` with the message in ``err`` (a ctypes char
    buffer); nothing when ``rc`` is OK."""
    if rc != OK:
        raise error_for_code(rc, err.value.decode("utf-8", "replace"))


def error_buffer():
    return ctypes.create_string_buffer(ERROR_BYTES)


def take_text(pointer: ctypes.c_void_p) -> str:
    """The library's malloc'ed text at ``pointer``, freed."""
    try:
        return ctypes.string_at(pointer.value).decode("utf-8", "replace")
    finally:
        free_text(pointer)
