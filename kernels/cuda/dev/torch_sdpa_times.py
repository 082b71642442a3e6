"""PyTorch scaled_dot_product_attention timings on the fused kernel's bench shapes (same GPU,
same run), for context in docs/perf.md. Median over L2-flushed launches via triton's do_bench."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

torch.backends.cuda.matmul.allow_tf32 = False


def bench(b, h, s, d, dtype, causal, backend):
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    try:
        with sdpa_kernel([backend]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fn()
            torch.cuda.synchronize()
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    except Exception as e:  # backend not available for this dtype/shape
        return None
    return ms * 1000.0


def flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


rows = []
for s in (128, 256, 512, 1024, 2048):
    for be in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        rows.append(("b1 h12 d64 S%d fp32" % s, be.name, bench(1, 12, s, 64, torch.float32, False, be), flops(1, 12, s, 64, False)))
for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    rows.append(("b1 h12 d64 S2048 fp16", be.name, bench(1, 12, 2048, 64, torch.float16, False, be), flops(1, 12, 2048, 64, False)))
for causal in (False, True):
    for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        rows.append(("b4 h16 d128 S4096 bf16 causal%d" % causal, be.name,
                     bench(4, 16, 4096, 128, torch.bfloat16, causal, be), flops(4, 16, 4096, 128, causal)))
print("%-36s %-22s %10s %8s" % ("shape", "backend", "median_us", "TFLOP/s"))
for name, be, us, f in rows:
    if us is None:
        print("%-36s %-22s %10s" % (name, be, "n/a"))
    else:
        print("%-36s %-22s %10.1f %8.1f" % (name, be, us, f / us / 1e6))
