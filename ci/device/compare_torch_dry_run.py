#!/usr/bin/env python3
"""Dry run of compare_torch.py on a machine without a GPU: PyTorch for the CPU (Debian's
python3-torch will do) with the CUDA pieces it uses faked (events read the host clock, the spin
and synchronize do nothing, SDPA is computed by matmul-softmax-matmul; flash and cudnn refuse
fp32 as the real ones do), ours through the real libfusetune_capi.so on its CPU backend (the
CPU tensors' data_ptr()s are host pointers), tiny shapes (tiny-fp32, tiny-fp32-causal,
tiny-bf16), and --cupti-check's profiler replaced by kernel events made from the timer's
samples (REAL_PROFILER=1 keeps torch.profiler). Checks the control flow, the C API calls and
the reports, not the timing.

Usage: /usr/bin/python3 ci/device/compare_torch_dry_run.py --lib build/kernels/capi/libfusetune_capi.so \
         --out /tmp/compare-dry --shapes tiny-fp32,tiny-bf16 --rounds 4 --launches 3 [--cupti-check ...]"""
import contextlib, ctypes, enum, importlib.util, math, os, sys, time, types
import torch
import torch.nn.functional as F

# --- tensors: drop device="cuda"
def strip(fn):
    def wrapped(*a, **k):
        if k.get("device") == "cuda":
            k.pop("device")
        return fn(*a, **k)
    return wrapped
for name in ("rand", "ones", "empty", "zeros", "full"):
    setattr(torch, name, strip(getattr(torch, name)))

# --- torch.cuda
class Event:
    def __init__(self, enable_timing=False): self.t = None
    def record(self): self.t = time.perf_counter()
    def synchronize(self): pass
    def elapsed_time(self, other): return (other.t - self.t) * 1000.0
class Props: uuid = "deadbeef-0000"
torch.cuda.Event = Event
torch.cuda._sleep = lambda cycles: None
torch.cuda.synchronize = lambda: None
torch.cuda.init = lambda: None
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_name = lambda *a: "fake GPU"
torch.cuda.empty_cache = lambda: None
torch.cuda.get_device_properties = lambda i: Props()

# --- torch.nn.attention + SDPA
class SDPBackend(enum.Enum):
    FLASH_ATTENTION = 1; EFFICIENT_ATTENTION = 2; CUDNN_ATTENTION = 3; MATH = 4
current = [None]
@contextlib.contextmanager
def sdpa_kernel(backend):
    current[0] = backend
    try: yield
    finally: current[0] = None
attention = types.ModuleType("torch.nn.attention")
attention.SDPBackend, attention.sdpa_kernel = SDPBackend, sdpa_kernel
sys.modules["torch.nn.attention"] = attention
torch.nn.attention = attention
def sdpa(q, k, v, is_causal=False):
    if current[0] in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION) and q.dtype == torch.float32:
        raise RuntimeError("No available kernel. Aborting execution.")
    sc = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if is_causal:
        n = q.shape[-2]
        sc = sc.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(sc, -1), v.float()).to(q.dtype)
F.scaled_dot_product_attention = sdpa

spec = importlib.util.spec_from_file_location(
    "compare_torch", os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_torch.py"))
ct = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ct)

# --- ours: the real library, CPU backend
class CreateOnCpu:
    def __init__(self, f): self.f = f
    argtypes = property(lambda s: s.f.argtypes, lambda s, v: setattr(s.f, "argtypes", v))
    def __call__(self, backend, *rest): return self.f(b"cpu", *rest)
class Lib:
    def __init__(self, path): self._lib = ctypes.CDLL(path); self._create = CreateOnCpu(self._lib.fusetune_create)
    def __getattr__(self, name):
        return self._create if name == "fusetune_create" else getattr(self._lib, name)
ct.ctypes = types.SimpleNamespace(**{n: getattr(ctypes, n) for n in dir(ctypes) if not n.startswith("_")})
ct.ctypes.CDLL = Lib
ct.L2_FLUSH_BYTES = 1 << 20
ct.SHAPES["tiny-fp32"] = ct.Shape("fp32 b1 h2 d64 S=64", 1, 2, 64, 64, False, ct.FP32, "fp32")
ct.SHAPES["tiny-fp32-causal"] = ct.Shape("fp32 b2 h2 d64 S=48 causal", 2, 2, 48, 64, True, ct.FP32, "fp32")
ct.SHAPES["tiny-bf16"] = ct.Shape("bf16 b1 h2 d64 S=32", 1, 2, 32, 64, False, ct.BF16, "bf16")
ct.CONFIG_CANDIDATES["ours"] = ["fused/bm64/bs64/t2/{p}/st1", "fused/bm32/bs32/t1/{p}/st1", "fused/bm64/bs64/t384/{p}/st3"]
ct.CONFIG_CANDIDATES["ours-materialized"] = ["materialized/bm64/bs64/t1/{p}/st1", "materialized/bm64/bs64/t2/{p}/st1"]

# --- profiler: fake kernel events shaped like a real trace
def fake_profiled(fn, trace_dir, tag):
    result = fn()
    if isinstance(result, tuple):
        return result, [("noise_fill", 0.0, 1.0)]
    if isinstance(result, list):  # a timer's samples: warm-up launches first, then one kernel per sample
        ev = [("k", 0.0, 5.0)] * 2 + [("noise_fill", 0.0, 1.0)] + [("k", float(i), s * 0.97) for i, s in enumerate(result)]
        return result, ev
    return result, [("k", 0.0, 5.0)]
if not os.environ.get("REAL_PROFILER"): ct.profiled = fake_profiled
if "--cupti-check" in sys.argv and "--cupti-shapes" not in sys.argv:
    sys.argv += ["--cupti-shapes", "tiny-fp32,tiny-bf16"]
if "--shapes" not in sys.argv:
    sys.argv += ["--shapes", "tiny-fp32,tiny-fp32-causal,tiny-bf16"]
sys.exit(ct.main())
