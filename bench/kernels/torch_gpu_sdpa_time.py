"""Times PyTorch's SDPA backends on a GPU for bench/kernels/gpu_flash_vs_torch.cpp.

usage: torch_gpu_sdpa_time.py DEVICE REPEAT SHAPE...   (SHAPE: B,H,L,D,DTYPE,CAUSAL)
First prints one line "machine <json>": torch's version, its CUDA/HIP build, the device's name and
capability (or gcnArchName). Then, for each SHAPE (DTYPE fp32|bf16|fp16, CAUSAL 0|1), one line per
backend: "BACKEND MS" (the median of REPEAT calls after 3 warm-ups, timed by CUDA events) or
"BACKEND error <why>". Backends: flash, mem_efficient, cudnn, math."""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION),
            ("mem_efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]


def machine(device):
    p = torch.cuda.get_device_properties(device)
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip,
            "device": p.name, "capability": "%d.%d" % (p.major, p.minor),
            "arch": getattr(p, "gcnArchName", ""), "multiprocessors": p.multi_processor_count,
            "memory_bytes": p.total_memory}


def time_ms(fn, repeat):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    device = torch.device("cuda", int(sys.argv[1]))
    repeat = int(sys.argv[2])
    print("machine " + json.dumps(machine(device)), flush=True)
    for shape in sys.argv[3:]:
        b, h, l, d, dtype, causal = shape.split(",")
        g = torch.Generator(device=device).manual_seed(0)
        q, k, v = (torch.rand(int(b), int(h), int(l), int(d), generator=g, device=device,
                              dtype=DTYPES[dtype]) * 2 - 1 for _ in range(3))
        def call():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal == "1")
        for name, backend in BACKENDS:
            try:
                with sdpa_kernel(backend), torch.no_grad():
                    ms = time_ms(call, repeat)
                print("%s %.4f" % (name, ms), flush=True)
            except Exception as e:  # one line back whatever happened, so the caller never blocks
                print("%s error %s" % (name, str(e).replace("\n", " ")[:160]), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
