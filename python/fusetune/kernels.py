"""The attention kernels on tensors: ``attention`` and ``attention_with_kvcache``.

Conventions are FlashAttention's: ``(batch, seqlen, heads, head_dim)`` tensors, or
``(total_tokens, heads, head_dim)`` with ``cu_seqlens`` for a packed (varlen) batch; a paged KV
cache is a pool ``(num_pages, page_size, kv_heads, head_dim)`` with an int32
``block_table (batch, pages per sequence)``. GQA/MQA follow from the head counts. These are the
layouts of the C ABI (``Q [total_q][q_heads][head_dim]``), so a contiguous tensor is passed as
it is: nothing is copied or transposed.

Tensors: torch tensors on the CPU or a CUDA device, numpy arrays (CPU). A CUDA call is
launched on the caller's current torch stream through ``fusetune_run_on_stream``: it does not
synchronize and, once a shape has run, allocates nothing in the library, so it may be
captured into a CUDA graph (``torch.cuda.graph``).

Every argument is checked before anything runs, and a bad one raises
:class:`fusetune.InvalidArgumentError` whose message starts with the argument's name. The
problem itself (head counts, lengths, scale) is checked by the C ABI, whose message names the
field; it is prefixed with the argument the field came from.

Thread-safety: the functions may be called from any number of threads; each thread gets its
own C ABI handle per device.
"""

from __future__ import annotations

import ctypes
import dataclasses
import numbers
import re
import sys
import threading
from typing import Optional

from . import _capi
from .config_cache import default_config_cache
from .errors import FusetuneError, InvalidArgumentError, error_for_code
from .problem import Config, Problem, as_config

__all__ = ["attention", "attention_with_kvcache", "device_class"]

# numpy and torch are optional: an argument can only be their array if they are imported, so
# they are looked up in sys.modules, never imported here.
_numpy_dtypes = None  # numpy dtype -> fusetune dtype name, made when numpy is first seen
_torch_dtypes = None  # the same for torch


def _ndarray(value) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _numpy_dtype_names(np):
    global _numpy_dtypes
    if _numpy_dtypes is None:
        _numpy_dtypes = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}
    return _numpy_dtypes


def _torch_dtype_names(torch):
    global _torch_dtypes
    if _torch_dtypes is None:
        _torch_dtypes = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    return _torch_dtypes


# ---------------------------------------------------------------- handles (one per thread and device)

class _Handle:
    """A C ABI handle with what each call on it reuses: its error buffer and launch struct."""

    __slots__ = ("ptr", "device_class", "err", "launch", "launch_ptr")

    def __init__(self, backend: str, device: int):
        ptr = ctypes.c_void_p()
        err = _capi.error_buffer()
        _capi.check(_capi.create(backend.encode(), device, ctypes.byref(ptr), err, len(err)), err)
        self.ptr = ptr.value
        buf = ctypes.create_string_buffer(_capi.KEY_BYTES)
        _capi.check(_capi.device_class(self.ptr, buf, len(buf)), buf)
        self.device_class = buf.value.decode()
        self.err = err
        self.launch = _capi.LaunchStruct()
        self.launch_ptr = ctypes.pointer(self.launch)

    # The C function is bound when the class is made: at interpreter shutdown the module's
    # globals (`_capi` among them) may already be None when a thread's handles are collected.
    def __del__(self, _destroy=_capi.destroy):
        if getattr(self, "ptr", None):
            _destroy(self.ptr)
            self.ptr = None


_local = threading.local()


def _handle(device: int) -> _Handle:
    """This thread's handle of the CPU (device -1) or of CUDA device `device`."""
    try:
        return _local.handles[device]
    except AttributeError:
        _local.handles = {}
    except KeyError:
        pass
    h = _Handle("cpu", 0) if device < 0 else _Handle("cuda", device)
    _local.handles[device] = h
    return h


def device_class(device=None) -> str:
    """The device class configs are tuned for (e.g. ``"cuda/NVIDIA-H200/sm90"``): of the CPU
    (``None``, ``"cpu"``), of a CUDA device (an index, ``"cuda:1"``, a ``torch.device``)."""
    if device is None or str(device) == "cpu":
        return _handle(-1).device_class
    if isinstance(device, int):
        return _handle(device).device_class
    text = str(device)
    if text == "cuda":
        torch = sys.modules.get("torch")
        return _handle(torch.cuda.current_device() if torch is not None else 0).device_class
    m = re.fullmatch(r"cuda:(\d+)", text)
    if m is None:
        raise InvalidArgumentError(f"device: expected None, 'cpu', 'cuda[:N]' or an index, got {device!r}")
    return _handle(int(m.group(1))).device_class


# ---------------------------------------------------------------- tensors

def _describe(t, name: str):
    """(shape, dtype name, device index (-1: CPU), contiguous, data pointer, is torch) of a tensor
    argument; InvalidArgumentError naming it for anything else. On every call's path: torch is
    asked first, and only for attributes that cost no object (is_cpu, not device)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor):
        dtype = (_torch_dtypes or _torch_dtype_names(torch)).get(t.dtype)
        if dtype is None:
            raise InvalidArgumentError(f"{name}: dtype {t.dtype} is not supported (float32, float16 or bfloat16)")
        if t.is_cuda:
            device = t.get_device()
        elif t.is_cpu:
            device = -1
        else:
            raise InvalidArgumentError(f"{name}: device {t.device} is not supported (cpu or cuda)")
        return t.shape, dtype, device, t.is_contiguous(), t.data_ptr(), True
    if _ndarray(t):
        dtype = _numpy_dtype_names(sys.modules["numpy"]).get(t.dtype)
        if dtype is None:
            raise InvalidArgumentError(f"{name}: dtype {t.dtype} is not supported (numpy: float32 or float16)")
        return t.shape, dtype, -1, t.flags.c_contiguous, t.ctypes.data, False
    raise InvalidArgumentError(f"{name}: expected a torch.Tensor or a numpy.ndarray, got {type(t).__name__}")


def _device_name(device: int) -> str:
    return "cpu" if device < 0 else f"cuda:{device}"


def _same(name: str, facts, reference_name: str, reference, shape=True):
    """Checks that argument `name` matches `reference_name` in kind, dtype and device (and shape)."""
    if facts[5] != reference[5]:
        raise InvalidArgumentError(f"{name}: must be the same kind of array as {reference_name} (torch or numpy)")
    if facts[1] != reference[1]:
        raise InvalidArgumentError(f"{name}: dtype {facts[1]} differs from {reference_name}'s {reference[1]}")
    if facts[2] != reference[2]:
        raise InvalidArgumentError(
            f"{name}: on {_device_name(facts[2])}, but {reference_name} is on {_device_name(reference[2])}")
    if shape and tuple(facts[0]) != tuple(reference[0]):
        raise InvalidArgumentError(
            f"{name}: shape {tuple(facts[0])} differs from {reference_name}'s {tuple(reference[0])}")


def _contiguous(name: str, facts):
    if not facts[3]:
        raise InvalidArgumentError(f"{name}: must be contiguous (call .contiguous() / numpy.ascontiguousarray)")


def _output(out, q, qf, device: int):
    """The call's output and its pointer: `out` checked against q (described as `qf`), or a new
    tensor like q."""
    if out is None:
        out = _empty_like(q, device, qf[5])
        return out, (out.data_ptr() if qf[5] else out.ctypes.data)
    of = _describe(out, "out")
    _same("out", of, "q", qf)
    _contiguous("out", of)
    return out, of[4]


def _empty_like(q, device: int, is_torch: bool):
    if is_torch:
        return sys.modules["torch"].empty_like(q)
    return sys.modules["numpy"].empty_like(q)


# ---------------------------------------------------------------- lengths

def _host_lengths(values, name: str, capturing: bool):
    """The host values of a lengths argument (a sequence of ints, a numpy array, a torch tensor
    on the CPU or on CUDA) as a tuple of ints."""
    if _ndarray(values):
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise InvalidArgumentError(f"{name}: expected a 1-D integer array, got {values.dtype} of shape {values.shape}")
        return tuple(int(x) for x in values)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor):
        if values.dim() != 1 or values.dtype != torch.int32:
            raise InvalidArgumentError(
                f"{name}: expected a 1-D torch.int32 tensor, got {values.dtype} of shape {tuple(values.shape)}")
        if values.is_cuda and capturing:
            raise InvalidArgumentError(
                f"{name}: its values are needed on the host to check the problem, and reading a CUDA tensor back "
                "synchronizes, which a CUDA graph capture forbids; pass it before capturing, or as host values")
        return tuple(int(x) for x in values.tolist())
    try:
        return tuple(int(x) for x in values)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{name}: expected a sequence of ints, a numpy array or an int32 tensor, got {type(values).__name__}") from None


def _device_lengths(values, host: tuple, name: str, device: int, capturing: bool):
    """A pointer to `name`'s values where the kernel reads them, and the object that owns that
    memory. CPU: a host int32 array. CUDA: `values` itself when it is an int32 CUDA tensor on the
    device, else a copy made with torch (refused while capturing: it copies host memory)."""
    if device < 0:
        array = (ctypes.c_int32 * len(host))(*host)
        return ctypes.addressof(array), array
    torch = sys.modules["torch"]
    if isinstance(values, torch.Tensor) and values.is_cuda:
        if values.get_device() != device:
            raise InvalidArgumentError(f"{name}: on cuda:{values.get_device()}, but q is on cuda:{device}")
        if not values.is_contiguous():
            raise InvalidArgumentError(f"{name}: must be contiguous")
        return values.data_ptr(), values
    if capturing:
        raise InvalidArgumentError(
            f"{name}: host values must be copied to the GPU, which a CUDA graph capture forbids; pass an int32 "
            "CUDA tensor")
    copy = torch.tensor(host, dtype=torch.int32, device=f"cuda:{device}")
    return copy.data_ptr(), copy


def _capturing(device: int) -> bool:
    if device < 0:
        return False
    return sys.modules["torch"].cuda.is_current_stream_capturing()


# ---------------------------------------------------------------- the problem's messages, by argument

# The C ABI names the problem's field; each field comes from one argument of these functions.
_FIELD_ARGUMENTS = {
    "attention": [("cu_seqlens_q", "cu_seqlens_q"), ("cu_seqlens_k", "cu_seqlens_k"), ("kv_heads", "k"),
                  ("q_heads", "q"), ("head_dim", "q"), ("softmax_scale", "softmax_scale"), ("batch", "q"),
                  ("q_len", "q"), ("kv_len", "k"), ("problem too large", "q")],
    "kvcache": [("kv_valid_lens", "cache_seqlens"), ("kv_heads", "k_cache"), ("q_heads", "q"), ("head_dim", "q"),
                ("softmax_scale", "softmax_scale"), ("batch", "q"), ("page_block_size", "k_cache"),
                ("block table", "block_table"), ("block_table", "block_table"), ("kv_pool_pages", "k_cache"),
                ("q_len", "q"), ("kv_len", "k_cache"), ("problem too large", "q")],
}
_TENSOR_NAMES = {"attention": {"q": "q", "k": "k", "v": "v", "o": "out"},
                 "kvcache": {"q": "q", "k": "k_cache", "v": "v_cache", "o": "out"}}


def _argument_error(kind: str, e: FusetuneError) -> FusetuneError:
    """`e` (an InvalidArgumentError from the C ABI) with the argument its field came from in front."""
    if not isinstance(e, InvalidArgumentError):
        return e
    message = e.message
    m = re.match(r"([qkvo]) \([0-9a-fA-Fx]+\) is not aligned", message)  # ValidateBuffers
    if m:
        name = _TENSOR_NAMES[kind][m.group(1)]
        return InvalidArgumentError(name + message[1:])
    first = None
    for field, argument in _FIELD_ARGUMENTS[kind]:
        found = re.search(r"\b" + re.escape(field) + r"\b", message)
        if found and (first is None or found.start() < first[0]):
            first = (found.start(), argument)
    if first is None:
        return e
    return InvalidArgumentError(f"{first[1]}: {message}")


# ---------------------------------------------------------------- plans: what a signature always needs

class _Plan:
    """The problem of one call signature with its C structs, made and validated once."""

    __slots__ = ("problem", "problem_ptr", "cache", "cache_ptr", "arrays", "device", "is_torch", "out_shape")

    def __init__(self, problem: Problem, device: int, is_torch: bool, out_shape, kind: str):
        try:
            problem.validate()
        except InvalidArgumentError as e:
            raise _argument_error(kind, e) from None
        problem_struct, cache_struct, arrays = problem._structs()
        self.problem = problem
        self.problem_ptr = ctypes.pointer(problem_struct)
        # A private copy: the block table pointer is set per call.
        self.cache = _capi.KvCacheStruct.from_buffer_copy(cache_struct)
        self.cache_ptr = ctypes.pointer(self.cache)
        self.arrays = arrays
        self.device = device
        self.is_torch = is_torch
        self.out_shape = out_shape


_plans = {}
_MAX_PLANS = 4096


def _remember(signature, plan: _Plan) -> _Plan:
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[signature] = plan
    return plan


def _config_struct_ptr(config, plan: _Plan, handle: _Handle):
    """The config to run, as a pointer to its C struct: `config`, or the config cache's answer."""
    if config is None:
        chosen = default_config_cache().lookup(plan.problem, handle.device_class).config
    elif isinstance(config, Config):
        chosen = config
    else:
        chosen = as_config(config)
    ptr = chosen.__dict__.get("_ptr")
    if ptr is None:
        ptr = ctypes.pointer(chosen._struct())
        object.__setattr__(chosen, "_ptr", ptr)
    return ptr


def _stream(device: int):
    """The current torch stream of CUDA device `device` (a cudaStream_t as an int)."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return torch.cuda.current_stream(device).cuda_stream


def _run(kind: str, plan: _Plan, handle: _Handle, config, q_ptr, k_ptr, v_ptr, o_ptr, launch_lengths=None,
         cache_ptr=None):
    launch = handle.launch
    if plan.device >= 0:
        launch.stream = _stream(plan.device)
        launch_ptr = handle.launch_ptr
    else:
        launch_ptr = None
    if launch_lengths is not None:
        launch.cu_seqlens_q, launch.cu_seqlens_k, launch.kv_valid_lens = launch_lengths
        launch_ptr = handle.launch_ptr
    elif launch_ptr is not None:
        launch.cu_seqlens_q = launch.cu_seqlens_k = launch.kv_valid_lens = None
    err = handle.err
    rc = _capi.run_on_stream(handle.ptr, plan.problem_ptr, cache_ptr if cache_ptr is not None else plan.cache_ptr,
                             _config_struct_ptr(config, plan, handle),
                             q_ptr, k_ptr, v_ptr, o_ptr, launch_ptr, err, _capi.ERROR_BYTES)
    if rc != 0:
        raise _argument_error(kind, error_for_code(rc, err.value.decode("utf-8", "replace")))


# ---------------------------------------------------------------- attention

def attention(q, k, v, *, causal: bool = False, softmax_scale: Optional[float] = None, cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
              config=None, out=None):
    """softmax(q kᵀ · scale) v, as ``flash_attn_func`` / ``flash_attn_varlen_func``.

    Args:
        q: ``(batch, seqlen_q, heads, head_dim)``, or ``(total_q, heads, head_dim)`` with cu_seqlens.
        k, v: ``(batch, seqlen_k, kv_heads, head_dim)`` or ``(total_k, kv_heads, head_dim)``;
            kv_heads divides heads (GQA; MQA with one).
        causal: bottom-right aligned causal mask (query i of a sequence with q queries and k keys
            sees keys j <= i + k - q), as FlashAttention 2.1+.
        softmax_scale: default ``1/sqrt(head_dim)``.
        cu_seqlens_q, cu_seqlens_k: a packed batch's prefix sums (batch + 1 ints from 0): int32
            tensors (CPU, or CUDA on q's device), numpy arrays or sequences. Their values are needed
            on the host, so a CUDA tensor is read back (a synchronization; not under graph capture).
        max_seqlen_q, max_seqlen_k: the longest sequences (computed when not given; checked).
        config: a :class:`fusetune.Config` or config key; default: the config cache's answer for
            this problem on this device (:func:`fusetune.default_config_cache`).
        out: where to write the result (q's shape, dtype and device, contiguous); default a new
            tensor or array.

    Returns:
        ``out``, or a new tensor (array) shaped like q.
    """
    qf = _describe(q, "q")
    kf = _describe(k, "k")
    vf = _describe(v, "v")
    if softmax_scale is not None and type(softmax_scale) is not float:
        softmax_scale = _scale(softmax_scale)  # checked before it keys a plan
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen or max_seqlen_q is not None or max_seqlen_k is not None:
        return _attention_varlen(q, k, v, qf, kf, vf, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k,
                                 max_seqlen_q, max_seqlen_k, config, out)
    signature = (qf[0], kf[0], vf[0], qf[1], kf[1], vf[1], qf[2], kf[2], vf[2], qf[5], kf[5], vf[5], causal,
                 softmax_scale)
    plan = _plans.get(signature)
    if plan is None:
        plan = _remember(signature, _attention_plan(qf, kf, vf, causal, softmax_scale))
    if not (qf[3] and kf[3] and vf[3]):
        for name, facts in (("q", qf), ("k", kf), ("v", vf)):
            _contiguous(name, facts)
    if out is None:
        out = _empty_like(q, plan.device, plan.is_torch)
        o_ptr = out.data_ptr() if plan.is_torch else out.ctypes.data
    else:
        of = _describe(out, "out")
        if of[0] != qf[0] or of[1] != qf[1] or of[2] != qf[2] or of[5] != qf[5]:
            _same("out", of, "q", qf)
        _contiguous("out", of)
        o_ptr = of[4]
    _run("attention", plan, _handle(plan.device), config, qf[4], kf[4], vf[4], o_ptr)
    return out


def _attention_plan(qf, kf, vf, causal, softmax_scale) -> _Plan:
    _same("k", kf, "q", qf, shape=False)
    _same("v", vf, "k", kf)
    if len(qf[0]) != 4:
        raise InvalidArgumentError(
            f"q: expected (batch, seqlen_q, heads, head_dim), or (total_q, heads, head_dim) with cu_seqlens_q; "
            f"got shape {tuple(qf[0])}")
    if len(kf[0]) != 4:
        raise InvalidArgumentError(f"k: expected (batch, seqlen_k, kv_heads, head_dim), got shape {tuple(kf[0])}")
    batch, q_len, q_heads, head_dim = qf[0]
    if kf[0][0] != batch:
        raise InvalidArgumentError(f"k: batch {kf[0][0]} differs from q's {batch}")
    if kf[0][3] != head_dim:
        raise InvalidArgumentError(f"k: head_dim {kf[0][3]} differs from q's {head_dim}")
    problem = Problem(batch=batch, q_heads=q_heads, kv_heads=kf[0][2], q_len=q_len, kv_len=kf[0][1],
                      head_dim=head_dim, causal=bool(causal), dtype=qf[1], softmax_scale=_scale(softmax_scale))
    return _Plan(problem, qf[2], qf[5], qf[0], "attention")


def _int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{name}: expected an int, got {value!r}")
    return int(value)


def _scale(softmax_scale) -> float:
    if softmax_scale is None:
        return 0.0
    try:
        scale = float(softmax_scale)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"softmax_scale: expected a number or None, got {softmax_scale!r}") from None
    if not scale > 0:
        raise InvalidArgumentError(f"softmax_scale: must be > 0 (or None for 1/sqrt(head_dim)), got {softmax_scale!r}")
    return scale


def _attention_varlen(q, k, v, qf, kf, vf, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, config, out):
    _same("k", kf, "q", qf, shape=False)
    _same("v", vf, "k", kf)
    for name, facts in (("q", qf), ("k", kf), ("v", vf)):
        _contiguous(name, facts)
    if cu_seqlens_q is None or cu_seqlens_k is None:
        missing = "cu_seqlens_q" if cu_seqlens_q is None else "cu_seqlens_k"
        raise InvalidArgumentError(f"{missing}: a packed batch needs both cu_seqlens_q and cu_seqlens_k "
                                   "(max_seqlen_q/k go with them)")
    if len(qf[0]) != 3:
        raise InvalidArgumentError(f"q: with cu_seqlens_q, expected (total_q, heads, head_dim), got shape {tuple(qf[0])}")
    if len(kf[0]) != 3:
        raise InvalidArgumentError(f"k: with cu_seqlens_k, expected (total_k, kv_heads, head_dim), got shape "
                                   f"{tuple(kf[0])}")
    device = qf[2]
    capturing = _capturing(device)
    host_q = _host_lengths(cu_seqlens_q, "cu_seqlens_q", capturing)
    host_k = _host_lengths(cu_seqlens_k, "cu_seqlens_k", capturing)
    if len(host_q) < 2:
        raise InvalidArgumentError(f"cu_seqlens_q: expected batch + 1 >= 2 prefix sums, got {len(host_q)}")
    if len(host_k) != len(host_q):
        raise InvalidArgumentError(f"cu_seqlens_k: {len(host_k)} entries, but cu_seqlens_q has {len(host_q)} "
                                   "(batch + 1 each)")
    batch = len(host_q) - 1
    total_q, q_heads, head_dim = qf[0]
    total_k, kv_heads, k_dim = kf[0]
    if host_q[-1] != total_q:
        raise InvalidArgumentError(f"q: {total_q} rows, but cu_seqlens_q ends at {host_q[-1]}")
    if host_k[-1] != total_k:
        raise InvalidArgumentError(f"k: {total_k} rows, but cu_seqlens_k ends at {host_k[-1]}")
    if k_dim != head_dim:
        raise InvalidArgumentError(f"k: head_dim {k_dim} differs from q's {head_dim}")
    longest_q = max(b - a for a, b in zip(host_q, host_q[1:]))
    longest_k = max(b - a for a, b in zip(host_k, host_k[1:]))
    problem = Problem(batch=batch, q_heads=q_heads, kv_heads=kv_heads,
                      q_len=longest_q if max_seqlen_q is None else _int("max_seqlen_q", max_seqlen_q),
                      kv_len=longest_k if max_seqlen_k is None else _int("max_seqlen_k", max_seqlen_k),
                      head_dim=head_dim, causal=bool(causal), dtype=qf[1], softmax_scale=_scale(softmax_scale),
                      cu_seqlens_q=host_q, cu_seqlens_k=host_k)
    try:
        plan = _Plan(problem, device, qf[5], qf[0], "attention")
    except InvalidArgumentError as e:
        # The C ABI names q_len/kv_len (the longest sequences): say which argument disagrees.
        if "longest sequence" in e.message:
            wrong = "max_seqlen_q" if problem.q_len != longest_q else "max_seqlen_k"
            raise InvalidArgumentError(f"{wrong}: {e.message.split(': ', 1)[-1]}") from None
        raise
    launch_lengths = None
    owners = None
    if device >= 0:
        q_lens, q_owner = _device_lengths(cu_seqlens_q, host_q, "cu_seqlens_q", device, capturing)
        k_lens, k_owner = _device_lengths(cu_seqlens_k, host_k, "cu_seqlens_k", device, capturing)
        launch_lengths = (q_lens, k_lens, None)
        owners = (q_owner, k_owner)  # alive until the launch is enqueued (torch orders their reuse)
    out, o_ptr = _output(out, q, qf, device)
    _run("attention", plan, _handle(device), config, qf[4], kf[4], vf[4], o_ptr, launch_lengths)
    del owners
    return out


# ---------------------------------------------------------------- attention over a KV cache

def attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table=None, causal: bool = True,
                           softmax_scale: Optional[float] = None, config=None, out=None):
    """Attention of new queries over a KV cache, as ``flash_attn_with_kvcache`` (without
    appending new keys: write them into the cache first, and count them in cache_seqlens).

    Args:
        q: ``(batch, seqlen_q, heads, head_dim)``: the new tokens' queries. Up to 16 per sequence
            run as decode, more as a prefill over the cache.
        k_cache, v_cache: ``(batch, capacity, kv_heads, head_dim)``, or with block_table a paged
            pool ``(num_pages, page_size, kv_heads, head_dim)``.
        cache_seqlens: the keys of each sequence (the new tokens' own included): an int for all,
            or ``(batch,)`` int32 (a tensor on q's device, a numpy array or a sequence). A CUDA
            tensor is read by the kernel when it runs, so a captured graph may be replayed after
            it changed; every value must be in [0, capacity] (``page_size * block_table.shape[1]``
            when paged), which the CPU checks and a GPU cannot without synchronizing.
        block_table: int32 ``(batch, pages per sequence)``: sequence b's key j is row
            ``j % page_size`` of page ``block_table[b, j // page_size]``; on q's device. The CPU
            checks that every page read is in the pool; on a GPU the table is read by the kernel
            only, and its entries are the caller's to keep in range.
        causal: bottom-right aligned, so the new tokens see the whole cache and each other causally.
        softmax_scale, config, out: as :func:`attention`.
    """
    qf = _describe(q, "q")
    kf = _describe(k_cache, "k_cache")
    vf = _describe(v_cache, "v_cache")
    if softmax_scale is not None and type(softmax_scale) is not float:
        softmax_scale = _scale(softmax_scale)  # checked before it keys a plan
    _same("k_cache", kf, "q", qf, shape=False)
    _same("v_cache", vf, "k_cache", kf)
    if len(qf[0]) != 4:
        raise InvalidArgumentError(f"q: expected (batch, seqlen_q, heads, head_dim), got shape {tuple(qf[0])}")
    if len(kf[0]) != 4:
        raise InvalidArgumentError(
            f"k_cache: expected (batch, capacity, kv_heads, head_dim) or a paged pool (num_pages, page_size, kv_heads, "
            f"head_dim), got shape {tuple(kf[0])}")
    for name, facts in (("q", qf), ("k_cache", kf), ("v_cache", vf)):
        _contiguous(name, facts)
    device = qf[2]
    batch, q_len, q_heads, head_dim = qf[0]
    if kf[0][3] != head_dim:
        raise InvalidArgumentError(f"k_cache: head_dim {kf[0][3]} differs from q's {head_dim}")
    kv_heads = kf[0][2]
    table_ptr = None
    if block_table is None:
        if kf[0][0] != batch:
            raise InvalidArgumentError(f"k_cache: batch {kf[0][0]} differs from q's {batch} (a contiguous cache has "
                                       "one row of keys per sequence; pass block_table for a paged pool)")
        kv_len = kf[0][1]
        paged = (0, 0, 0)
    else:
        table_ptr, width = _block_table(block_table, batch, device, qf[5])
        page_size = kf[0][1]
        kv_len = page_size * width
        paged = (page_size, kf[0][0], width)
    kind = "decode" if q_len <= 16 else "prefill"
    signature = ("kvcache", qf[0], kf[0], qf[1], device, qf[5], paged, causal, softmax_scale)
    plan = _plans.get(signature)
    if plan is None:
        # The batch at its capacity: the lengths are the launch's, read when the kernel runs.
        problem = Problem(batch=batch, q_heads=q_heads, kv_heads=kv_heads, q_len=q_len, kv_len=kv_len,
                          head_dim=head_dim, causal=bool(causal), dtype=qf[1], softmax_scale=_scale(softmax_scale),
                          kind=kind, page_block_size=paged[0], kv_pool_pages=paged[1], block_table_width=paged[2])
        plan = _remember(signature, _Plan(problem, device, qf[5], qf[0], "kvcache"))
    kv_lengths, owner = _cache_seqlens(cache_seqlens, plan.problem, device)
    out, o_ptr = _output(out, q, qf, device)
    # The plan is shared by threads; the table pointer is this call's.
    cache_ptr = None
    if table_ptr is not None:
        cache = _capi.KvCacheStruct.from_buffer_copy(plan.cache)
        cache.block_table = table_ptr
        cache_ptr = ctypes.pointer(cache)
    _run("kvcache", plan, _handle(device), config, qf[4], kf[4], vf[4], o_ptr,
         None if kv_lengths is None else (None, None, kv_lengths), cache_ptr=cache_ptr)
    del owner
    return out


def _block_table(block_table, batch: int, device: int, is_torch: bool):
    """(pointer, pages per sequence) of a block table argument."""
    if _ndarray(block_table):
        np = sys.modules["numpy"]
        if device >= 0:
            raise InvalidArgumentError(f"block_table: a numpy array is host memory, but q is on cuda:{device}")
        if block_table.dtype != np.int32 or block_table.ndim != 2:
            raise InvalidArgumentError(
                f"block_table: expected a 2-D int32 array (batch, pages), got {block_table.dtype} of shape "
                f"{block_table.shape}")
        if not block_table.flags.c_contiguous:
            raise InvalidArgumentError("block_table: must be contiguous")
        shape, ptr = block_table.shape, block_table.ctypes.data
    else:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(block_table, torch.Tensor):
            raise InvalidArgumentError(
                f"block_table: expected an int32 torch.Tensor or numpy.ndarray, got {type(block_table).__name__}")
        if block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise InvalidArgumentError(
                f"block_table: expected a 2-D torch.int32 tensor (batch, pages), got {block_table.dtype} of shape "
                f"{tuple(block_table.shape)}")
        table_device = block_table.get_device() if block_table.is_cuda else -1
        if table_device != device:
            raise InvalidArgumentError(f"block_table: on {_device_name(table_device)}, but q is on {_device_name(device)}")
        if not block_table.is_contiguous():
            raise InvalidArgumentError("block_table: must be contiguous")
        shape, ptr = tuple(block_table.shape), block_table.data_ptr()
    if shape[0] != batch:
        raise InvalidArgumentError(f"block_table: {shape[0]} rows, but q has batch {batch}")
    if shape[1] < 1:
        raise InvalidArgumentError("block_table: needs at least one page per sequence")
    return ptr, shape[1]


def _cache_seqlens(values, problem: Problem, device: int):
    """(pointer the kernel reads, its owner) of cache_seqlens for the batch at capacity
    `problem`; (None, None) when every sequence is full. A CUDA tensor is used as it is (read
    when the kernel runs); host values are checked by the C ABI (as the problem's key padding)
    and put where the kernel reads them."""
    batch = problem.batch
    if values is None:
        raise InvalidArgumentError("cache_seqlens: required (an int, or one length per sequence)")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor) and values.is_cuda:
        if device < 0:
            raise InvalidArgumentError(f"cache_seqlens: on cuda:{values.get_device()}, but q is on the cpu")
        if values.get_device() != device:
            raise InvalidArgumentError(f"cache_seqlens: on cuda:{values.get_device()}, but q is on cuda:{device}")
        if values.dtype != torch.int32 or tuple(values.shape) != (batch,):
            raise InvalidArgumentError(
                f"cache_seqlens: expected a ({batch},) torch.int32 tensor, got {values.dtype} of shape "
                f"{tuple(values.shape)}")
        if not values.is_contiguous():
            raise InvalidArgumentError("cache_seqlens: must be contiguous")
        return values.data_ptr(), values
    if isinstance(values, numbers.Integral) and not isinstance(values, bool):
        if int(values) == problem.kv_len:
            return None, None
        host = (int(values),) * batch
        uniform = True
    else:
        host = _host_lengths(values, "cache_seqlens", _capturing(device))
        if len(host) != batch:
            raise InvalidArgumentError(f"cache_seqlens: {len(host)} entries, but q has batch {batch}")
        uniform = False
    try:
        dataclasses.replace(problem, kv_valid_lens=host).validate()
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"cache_seqlens: {e.message} (kv_len is the cache's capacity)") from None
    if uniform and device >= 0:
        # Filled on the GPU: no host copy, so this works under graph capture too.
        torch = sys.modules["torch"]
        owner = torch.full((batch,), host[0], dtype=torch.int32, device=f"cuda:{device}")
        return owner.data_ptr(), owner
    return _device_lengths(values, host, "cache_seqlens", device, _capturing(device))
