"""Times PyTorch's CPU flash SDPA for bench/kernels/flash_vs_torch.cpp.

usage: torch_flash_time.py THREADS [cpu]
Reads one request per line on stdin, "B H L D DTYPE CAUSAL" (DTYPE fp32|bf16|fp16, CAUSAL 0|1),
runs the call once and answers one line on stdout: its wall time in milliseconds (with "cpu":
the calling thread's CPU time, meaningful with THREADS 1 only), or "error <why>". Inputs are made on the first request for a shape and kept, so the caller can alternate
single calls of ours and torch's under the same load. EOF ends the process."""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

torch.set_num_threads(int(sys.argv[1]))
clock = time.thread_time if sys.argv[2:] == ["cpu"] else time.perf_counter
inputs = {}
for line in sys.stdin:
    try:
        b, h, l, d, dtype, causal = line.split()
        key = (int(b), int(h), int(l), int(d), dtype)
        if key not in inputs:
            inputs.clear()
            g = torch.Generator().manual_seed(0)
            inputs[key] = tuple(
                (torch.rand(key[0], key[1], key[2], key[3], generator=g) * 2 - 1).to(DTYPES[dtype])
                for _ in range(3))
        q, k, v = inputs[key]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.no_grad():
            t0 = clock()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal == "1")
            t1 = clock()
        print(f"{(t1 - t0) * 1e3:.4f}", flush=True)
    except Exception as e:  # one line back whatever happened, so the caller never blocks
        print("error " + str(e).replace("\n", " ")[:200], flush=True)
