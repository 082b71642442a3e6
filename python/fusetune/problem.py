"""Problems and configs: ``fusetune.Problem`` mirrors ``AttentionProblem``, ``fusetune.Config``
mirrors ``KernelConfig`` (kernels/include/fusetune/kernels/problem.h and config.h).

Neither checks anything itself: :meth:`Problem.validate`, :meth:`Problem.key` and the config
keys go through the C ABI, so a Python problem is valid exactly when the C++ one is, with the
same message, and its key is the C++ key byte for byte.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Optional, Tuple, Union

from . import _capi
from .errors import InvalidArgumentError

__all__ = ["Problem", "Config", "seed_problems", "tolerance"]


def _lengths(values) -> Tuple[int, ...]:
    return tuple(int(v) for v in values) if values is not None else ()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One attention call's shape, as ``AttentionProblem`` (problem.h says what each field means).

    ``kv_heads`` 0 means ``q_heads``. Length lists are tuples of ints (empty: none). ``kind`` is
    ``"prefill"`` or ``"decode"``; ``dtype`` ``"fp32"``, ``"fp16"`` or ``"bf16"``. A paged KV
    cache has ``page_block_size`` > 0.
    """

    batch: int = 1
    q_heads: int = 1
    kv_heads: int = 0
    q_len: int = 0
    kv_len: int = 0
    head_dim: int = 64
    causal: bool = False
    dtype: str = "fp32"
    softmax_scale: float = 0.0
    kind: str = "prefill"
    cu_seqlens_q: Tuple[int, ...] = ()
    cu_seqlens_k: Tuple[int, ...] = ()
    kv_valid_lens: Tuple[int, ...] = ()
    page_block_size: int = 0
    kv_pool_pages: int = 0
    block_table_width: int = 0
    shared_prefix_pages: int = 0

    def __post_init__(self):
        for name in ("cu_seqlens_q", "cu_seqlens_k", "kv_valid_lens"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, _lengths(value))
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.q_heads)
        # What ConfigCache keys on: every field, in a tuple built once.
        object.__setattr__(self, "_cache_key", dataclasses.astuple(self))

    # The C structs are made once per problem (the arrays they point at live with them).
    def _structs(self):
        structs = self.__dict__.get("_c")
        if structs is None:
            structs = _to_structs(self)
            object.__setattr__(self, "_c", structs)
        return structs

    def validate(self) -> None:
        """Raises :class:`fusetune.InvalidArgumentError` (the C ABI's message, naming the field)
        when the problem is invalid."""
        problem, cache = self._structs()[:2]
        err = _capi.error_buffer()
        _capi.check(_capi.problem_validate(ctypes.byref(problem), ctypes.byref(cache), err, len(err)), err)

    def key(self) -> str:
        """The canonical key (``AttentionProblem::Key()``), e.g.
        ``"prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"``; validates first."""
        cached = self.__dict__.get("_key")
        if cached is None:
            problem, cache = self._structs()[:2]
            out = ctypes.create_string_buffer(_capi.KEY_BYTES)
            err = _capi.error_buffer()
            _capi.check(_capi.problem_key(ctypes.byref(problem), ctypes.byref(cache), out, len(out), err, len(err)),
                        err)
            cached = out.value.decode()
            object.__setattr__(self, "_key", cached)
        return cached

    def to_dict(self) -> dict:
        """The fields as a dict (length lists as lists), e.g. for JSON."""
        d = dataclasses.asdict(self)
        for name in ("cu_seqlens_q", "cu_seqlens_k", "kv_valid_lens"):
            d[name] = list(d[name])
        return d


def _int32_array(values: Tuple[int, ...]):
    if not values:
        return None
    array = (ctypes.c_int32 * len(values))()
    for i, v in enumerate(values):
        array[i] = v
    return array


def _to_structs(p: Problem):
    """(fusetune_problem, fusetune_kv_cache, the arrays they point at) for ``p``."""
    dtype = _capi.DTYPES.get(p.dtype)
    if dtype is None:
        raise InvalidArgumentError(f"dtype must be one of fp32, fp16, bf16, got {p.dtype!r}")
    if p.kind not in ("prefill", "decode"):
        raise InvalidArgumentError(f"kind must be 'prefill' or 'decode', got {p.kind!r}")
    arrays = [_int32_array(p.cu_seqlens_q), _int32_array(p.cu_seqlens_k), _int32_array(p.kv_valid_lens)]
    if arrays[0] is not None and len(arrays[0]) != p.batch + 1:
        raise InvalidArgumentError(f"cu_seqlens_q must have batch + 1 = {p.batch + 1} entries, got {len(arrays[0])}")
    if arrays[1] is not None and len(arrays[1]) != p.batch + 1:
        raise InvalidArgumentError(f"cu_seqlens_k must have batch + 1 = {p.batch + 1} entries, got {len(arrays[1])}")
    if arrays[2] is not None and len(arrays[2]) != p.batch:
        raise InvalidArgumentError(f"kv_valid_lens must have batch = {p.batch} entries, got {len(arrays[2])}")
    address = [ctypes.addressof(a) if a is not None else None for a in arrays]
    problem = _capi.ProblemStruct(p.batch, p.q_heads, p.kv_heads, p.q_len, p.kv_len, p.head_dim, int(bool(p.causal)),
                                  dtype, p.softmax_scale, address[0], address[1], address[2])
    cache = _capi.KvCacheStruct(1 if p.kind == "decode" else 0, p.page_block_size, p.kv_pool_pages,
                                p.block_table_width, p.shared_prefix_pages, None)
    return problem, cache, arrays


_VARIANT_NAMES = {v: k for k, v in _capi.VARIANTS.items()}
_PRECISION_NAMES = {v: k for k, v in _capi.PRECISIONS.items()}


@dataclasses.dataclass(frozen=True)
class Config:
    """One kernel config, as ``KernelConfig`` (config.h). ``split_kv`` 0 = planned at launch;
    ``pingpong`` and ``persistent`` are schedules of the Hopper fused kernel (CUDA only)."""

    variant: str = "fused"
    block_m: int = 64
    block_s: int = 64
    threads: int = 1
    precision: str = "fp32"
    stages: int = 1
    split_kv: int = 1
    pingpong: bool = False
    persistent: bool = False

    @staticmethod
    def from_key(key: str) -> "Config":
        """Parses a canonical key such as ``"fused/bm64/bs64/t128/bf16/st2"``; InvalidArgumentError
        for anything ``KernelConfig::Key()`` cannot produce."""
        c = _capi.ConfigStruct()
        err = _capi.error_buffer()
        _capi.check(_capi.config_from_key(key.encode(), ctypes.byref(c), err, len(err)), err)
        return Config._from_struct(c)

    @staticmethod
    def _from_struct(c) -> "Config":
        return Config(_VARIANT_NAMES[c.variant], c.block_m, c.block_s, c.threads, _PRECISION_NAMES[c.precision],
                      c.stages, c.split_kv, bool(c.pingpong), bool(c.persistent))

    def _struct(self):
        s = self.__dict__.get("_c")
        if s is None:
            variant = _capi.VARIANTS.get(self.variant)
            precision = _capi.PRECISIONS.get(self.precision)
            if variant is None or precision is None:
                        raise InvalidArgumentError(
                    f"config: variant must be fused, partial or materialized and precision fp32, tf32, fp16 or bf16, "
                    f"got {self.variant!r} and {self.precision!r}")
            # int(): the library refuses anything but 0 and 1, so a stray 2 is not read as True.
            s = _capi.ConfigStruct(variant, self.block_m, self.block_s, self.threads, precision, self.stages,
                                   self.split_kv, int(self.pingpong), int(self.persistent))
            object.__setattr__(self, "_c", s)
        return s

    def key(self) -> str:
        """The canonical key (``KernelConfig::Key()``); InvalidArgumentError for a config out of range."""
        cached = self.__dict__.get("_key")
        if cached is None:
            out = ctypes.create_string_buffer(_capi.KEY_BYTES)
            err = _capi.error_buffer()
            _capi.check(_capi.config_key(ctypes.byref(self._struct()), out, len(out), err, len(err)), err)
            cached = out.value.decode()
            object.__setattr__(self, "_key", cached)
        return cached

    def __str__(self) -> str:
        return self.key()


def as_config(config: Union["Config", str, None]) -> Optional[Config]:
    """A Config from a Config, a key, or None; InvalidArgumentError naming the argument "config"."""
    if config is None or isinstance(config, Config):
        return config
    if isinstance(config, str):
        try:
            return Config.from_key(config)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"config: {e.message}") from None
    raise InvalidArgumentError(f"config: expected a fusetune.Config, a config key or None, got {type(config).__name__}")


def tolerance(precision: str, dtype: str) -> float:
    """The largest ``max|out - ref| / max|ref|`` the library's verification accepts for a
    precision (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``) and a storage dtype (``"fp32"``,
    ``"fp16"``, ``"bf16"``) on inputs uniform in [-1, 1] with the default scale: the C ABI's
    ``fusetune_tolerance``, the one table (kernels/reference.h). InvalidArgumentError for an
    unknown name."""
    p = _capi.PRECISIONS.get(precision)
    d = _capi.DTYPES.get(dtype)
    if p is None or d is None:
        raise InvalidArgumentError(f"unknown precision {precision!r} or dtype {dtype!r}")
    out = ctypes.c_double()
    rc = _capi.tolerance(p, d, ctypes.byref(out))
    if rc != _capi.OK:
        raise InvalidArgumentError(f"fusetune_tolerance: {_capi.status_name(rc).decode()}")
    return out.value


def seed_problems() -> list:
    """The seed shapes (the ``seed`` preset of ``fusetune sweep``): the C ABI's
    ``fusetune_seed_problems``, shortest first."""
    count = ctypes.c_size_t()
    if _capi.seed_problems(None, 0, ctypes.byref(count)) != _capi.OK:
        raise InvalidArgumentError("fusetune_seed_problems failed")
    structs = (_capi.ProblemStruct * count.value)()
    if _capi.seed_problems(structs, count.value, ctypes.byref(count)) != _capi.OK:
        raise InvalidArgumentError("fusetune_seed_problems failed")
    dtype_names = {v: k for k, v in _capi.DTYPES.items()}
    return [Problem(batch=s.batch, q_heads=s.q_heads, kv_heads=s.kv_heads, q_len=s.q_len, kv_len=s.kv_len,
                    head_dim=s.head_dim, causal=bool(s.causal), dtype=dtype_names[s.dtype],
                    softmax_scale=s.softmax_scale) for s in structs]
