"""Times PyTorch's CPU flash SDPA for bench/kernels: prints one line "<median ms>" for
B H L D causal(0|1) threads warmup repeat, on the same inputs shape as our benchmark (fp32)."""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

b, h, l, d, causal, threads, warmup, repeat = (int(x) for x in sys.argv[1:9])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
q, k, v = (torch.rand(b, h, l, d, generator=g) * 2 - 1 for _ in range(3))
times = []
with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.no_grad():
    for n in range(warmup + repeat):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        t1 = time.perf_counter()
        if n >= warmup:
            times.append((t1 - t0) * 1e3)
times.sort()
print(f"{times[len(times) // 2]:.4f}")
