"""Independent witness for the kernel tests: rebuilds a case's inputs with torch int64 ops, exactly
as src/core/inputs.hpp defines them, runs PyTorch's math SDPA on the CPU in float64 and writes the
output as raw little-endian float64, logical (B,Hq,Lq,D).

usage: torch_math_reference.py [--grad] OUT_DIR CASE...
  CASE = dtype,b,hq,hkv,lq,lkv,d,causal(0|1),mask(none|bool|additive),seed; the n-th case's output
  goes to OUT_DIR/<n>.f64. One process for all cases: importing torch costs seconds.
  --grad: also the float64 autograd gradients for the upstream gradient in OUT_DIR/<n>.dout.f64
  (raw float64, logical (B,Hq,Lq,D)): OUT_DIR/<n>.dq.f64 (B,Hq,Lq,D), <n>.dk.f64 and <n>.dv.f64
  (B,Hkv,Lkv,D; GQA's repeated heads summed back by autograd).
Exit 3 when torch is not importable (the test then skips).
"""
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as exc:  # noqa: BLE001 - any import failure means "no torch here"
    print(f"no torch: {exc}", file=sys.stderr)
    sys.exit(3)

M32 = 0xFFFFFFFF


def hash32(x):
    x = x & M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & M32
    return x ^ (x >> 16)


def input_key(seed, tensor):
    h = int(hash32(torch.tensor(seed & M32, dtype=torch.int64)))
    return int(hash32(torch.tensor(h ^ ((tensor * 0x9E3779B9) & M32), dtype=torch.int64)))


def bits(key, count):
    return hash32((torch.arange(count, dtype=torch.int64) + key) & M32)


def unit(u):
    # (u >> 8) * 2^-23 - 1, exact in float32
    return (u >> 8).to(torch.float32) * (2.0 ** -23) - 1.0


def write_f64(path, tensor):
    # No numpy needed: the raw bytes of the float64 tensor.
    raw = tensor.detach().contiguous().flatten().view(torch.uint8)
    with open(path, "wb") as f:
        f.write(bytes(raw.tolist()))


def read_f64(path, shape):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=torch.float64).reshape(shape).clone()


def run_case(prefix, spec, grad=False):
    fields = spec.split(",")
    dtype_name = fields[0]
    b, hq, hkv, lq, lkv, d = (int(x) for x in fields[1:7])
    causal, mask_kind, seed = fields[7] == "1", fields[8], int(fields[9])
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]

    def tensor(t, shape, scale):
        u = bits(input_key(seed, t), int(torch.tensor(shape).prod()))
        return (scale * unit(u)).to(dt).to(torch.float64).reshape(shape)

    q = tensor(0, (b, hq, lq, d), 4.0)
    k = tensor(1, (b, hkv, lkv, d), 1.0)
    v = tensor(2, (b, hkv, lkv, d), 1.0)
    attn_mask = None
    if mask_kind != "none":
        u = bits(input_key(seed, 3), b * lq * lkv).reshape(b, 1, lq, lkv)
        if mask_kind == "bool":
            first = torch.zeros(lkv, dtype=torch.bool)
            first[0] = True
            attn_mask = ((u & 3) != 0) | first
        else:
            attn_mask = (-2.0 * (unit(u) + 1.0)).to(dt).to(torch.float64)
    if causal and attn_mask is not None:
        # SDPA takes is_causal or a mask, not both: fold the (top-left) causal part in.
        tril = torch.ones(lq, lkv, dtype=torch.bool).tril()
        if attn_mask.dtype == torch.bool:
            attn_mask = attn_mask & tril
        else:
            attn_mask = attn_mask.masked_fill(~tril, float("-inf"))
        causal = False
    group = hq // hkv
    for t in (q, k, v):
        t.requires_grad_(grad)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                             v.repeat_interleave(group, dim=1),
                                             attn_mask=attn_mask, is_causal=causal)
    write_f64(prefix + ".f64", out)
    if grad:
        out.backward(read_f64(prefix + ".dout.f64", out.shape))
        for name, t in (("dq", q), ("dk", k), ("dv", v)):
            write_f64(f"{prefix}.{name}.f64", t.grad)


def main():
    args = sys.argv[1:]
    grad = args[:1] == ["--grad"]
    if grad:
        args = args[1:]
    out_dir = args[0]
    for n, spec in enumerate(args[1:]):
        run_case(f"{out_dir}/{n}", spec, grad)


if __name__ == "__main__":
    main()
