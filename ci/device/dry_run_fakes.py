"""The fakes the dry runs of the GPU comparison scripts (compare_torch.py, compare_decode.py)
share, for a machine without a GPU: PyTorch for the CPU (Debian's python3-torch will do) with
the CUDA pieces the scripts use faked (events read the host clock, the spin and synchronize do
nothing, SDPA is computed by matmul-softmax-matmul, with GQA and masks; flash and cudnn refuse
fp32 as the real ones do), and ours through the real libfusetune_capi.so on its CPU backend
(the CPU tensors' data_ptr()s are host pointers). They check control flow, the C API calls and
the reports, not the timing.

install() must run before a script module is loaded; load(name) loads ci/device/<name>.py as
module `name` (so that a script importing another gets the faked one); use_cpu_library(module)
makes that module's Fusetune open the library on the CPU backend."""
import contextlib, ctypes, enum, importlib.util, math, os, sys, time, types

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _strip_cuda(fn):
    def wrapped(*a, **k):
        if k.get("device") == "cuda":
            k.pop("device")
        return fn(*a, **k)
    return wrapped


class Event:
    def __init__(self, enable_timing=False): self.t = None
    def record(self): self.t = time.perf_counter()
    def synchronize(self): pass
    def elapsed_time(self, other): return (other.t - self.t) * 1000.0


class Props:
    uuid = "deadbeef-0000"


class SDPBackend(enum.Enum):
    FLASH_ATTENTION = 1; EFFICIENT_ATTENTION = 2; CUDNN_ATTENTION = 3; MATH = 4


_current = [None]


@contextlib.contextmanager
def sdpa_kernel(backend):
    _current[0] = backend
    try:
        yield
    finally:
        _current[0] = None


def causal_lower_right(q_len, kv_len):
    """A boolean mask (True = attend) standing in for torch's CausalBias."""
    i = torch.arange(q_len).unsqueeze(1)
    j = torch.arange(kv_len).unsqueeze(0)
    return j <= i + (kv_len - q_len)


def sdpa(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
    if _current[0] in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION) and q.dtype == torch.float32:
        raise RuntimeError("No available kernel. Aborting execution.")
    if k.shape[-3] != q.shape[-3]:
        if not enable_gqa:
            raise RuntimeError("query and key heads differ without enable_gqa")
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    sc = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    n, m = q.shape[-2], k.shape[-2]
    if is_causal:  # top-left aligned, as torch's is_causal
        sc = sc.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
    if attn_mask is not None:
        sc = sc.masked_fill(~attn_mask, float("-inf"))
    return torch.matmul(torch.softmax(sc, -1), v.float()).to(q.dtype)


def install():
    for name in ("rand", "ones", "empty", "zeros", "full", "randperm", "arange", "tensor"):
        setattr(torch, name, _strip_cuda(getattr(torch, name)))
    torch.cuda.Event = Event
    torch.cuda._sleep = lambda cycles: None
    torch.cuda.synchronize = lambda: None
    torch.cuda.init = lambda: None
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda *a: "fake GPU"
    torch.cuda.empty_cache = lambda: None
    torch.cuda.get_device_properties = lambda i: Props()
    torch.cuda.current_stream = lambda *a: types.SimpleNamespace(cuda_stream=0)  # the CPU backend takes NULL only
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend, attention.sdpa_kernel = SDPBackend, sdpa_kernel
    bias = types.ModuleType("torch.nn.attention.bias")
    bias.causal_lower_right = causal_lower_right
    attention.bias = bias
    sys.modules["torch.nn.attention"] = attention
    sys.modules["torch.nn.attention.bias"] = bias
    torch.nn.attention = attention
    F.scaled_dot_product_attention = sdpa


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _CreateOnCpu:
    def __init__(self, f): self.f = f
    argtypes = property(lambda s: s.f.argtypes, lambda s, v: setattr(s.f, "argtypes", v))
    def __call__(self, backend, *rest): return self.f(b"cpu", *rest)


class _CpuLibrary:
    def __init__(self, path):
        self._lib = ctypes.CDLL(path)
        self._create = _CreateOnCpu(self._lib.fusetune_create)

    def __getattr__(self, name):
        return self._create if name == "fusetune_create" else getattr(self._lib, name)


def use_cpu_library(module):
    """`module`'s ctypes.CDLL opens the library with fusetune_create on "cpu"; a small L2 flush."""
    module.ctypes = types.SimpleNamespace(**{n: getattr(ctypes, n) for n in dir(ctypes) if not n.startswith("_")})
    module.ctypes.CDLL = _CpuLibrary
    module.L2_FLUSH_BYTES = 1 << 20
