# The deterministic inputs of a case, bit for bit those of sdpa-doctor's C++ workers
# (src/core/inputs.hpp; keep the two in step). No imports: `torch` is passed in, so the scripts
# `sdpa-doctor repro` writes paste this file in as it is, and their inputs are the probe's.

MASK32 = 0xFFFFFFFF
INPUT_CHUNK = 1 << 18  # elements per step of the input generator: 2 MiB of int64


def kv_elements(c):
    return c["b"] * c["hkv"] * c["lkv"] * c["d"]


def q_elements(c):
    return c["b"] * c["hq"] * c["lq"] * c["d"]


def hash32_int(x):
    x &= MASK32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & MASK32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & MASK32
    x ^= x >> 16
    return x


def input_key(seed, tensor_index):
    return hash32_int(hash32_int(seed & MASK32) ^ ((tensor_index * 0x9E3779B9) & MASK32))


def hash32_tensor(torch, x):
    # int64 holds every intermediate: x < 2^32 and the multiplier < 2^27. In place: one
    # temporary at a time, not six (an int64 copy of a decode case's K is a gigabyte).
    x.bitwise_xor_(x >> 16)
    x.mul_(0x45D9F3B).bitwise_and_(MASK32)
    x.bitwise_xor_(x >> 16)
    x.mul_(0x45D9F3B).bitwise_and_(MASK32)
    x.bitwise_xor_(x >> 16)
    return x


def bits(torch, key, count):
    idx = torch.arange(count, dtype=torch.int64)
    return hash32_tensor(torch, idx.add_(key).bitwise_and_(MASK32))


def unit_from_bits(torch, u):
    # (u >> 8) < 2^24 and the scale is a power of two: exact in float32, as in C++.
    return (u >> 8).to(torch.float32) * (2.0 ** -23) - 1.0


def torch_dtype(torch, name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def fill_tensor(torch, dt, key, count, scale):
    """`count` values scale * unit of the tensor with this key, rounded to dt as .to(dt) does."""
    # In chunks that stay in cache: a decode case's K is 10^8 elements, and each whole-tensor
    # int64 pass would stream gigabytes through memory.
    out = torch.empty(count, dtype=dt)
    for start in range(0, count, INPUT_CHUNK):
        n = min(INPUT_CHUNK, count - start)
        idx = torch.arange(start, start + n, dtype=torch.int64)
        u = hash32_tensor(torch, idx.add_(key).bitwise_and_(MASK32))
        out[start:start + n] = unit_from_bits(torch, u) * scale
    return out


def make_inputs(torch, c):
    """q, k, v (logical B,H,L,D) in the case dtype and the mask (B,1,Lq,Lkv) or None, on CPU."""
    dt = torch_dtype(torch, c["dtype"])
    seed = c["seed"]

    def fill(index, count, scale, shape):
        return fill_tensor(torch, dt, input_key(seed, index), count, scale).reshape(shape)

    q = fill(0, q_elements(c), 4.0, (c["b"], c["hq"], c["lq"], c["d"]))
    kv = kv_elements(c)
    k = fill(1, kv, 1.0, (c["b"], c["hkv"], c["lkv"], c["d"]))
    v = fill(2, kv, 1.0, (c["b"], c["hkv"], c["lkv"], c["d"]))
    mask = None
    if c["mask"] != "none":
        count = c["b"] * c["lq"] * c["lkv"]
        u = bits(torch, input_key(seed, 3), count)
        shape = (c["b"], 1, c["lq"], c["lkv"])
        if c["mask"] == "bool":
            first_key = (torch.arange(count, dtype=torch.int64) % c["lkv"]) == 0
            mask = (first_key | ((u & 3) != 0)).reshape(shape)
        else:
            mask = ((unit_from_bits(torch, u) + 1.0) * -2.0).to(dt).reshape(shape)
    return q, k, v, mask


def make_upstream_gradient(torch, c):
    """A backward case's upstream gradient dO (logical B,Hq,Lq,D) in the case dtype, on CPU."""
    out = fill_tensor(torch, torch_dtype(torch, c["dtype"]), input_key(c["seed"], 4), q_elements(c),
                      1.0)
    return out.reshape(c["b"], c["hq"], c["lq"], c["d"])


def laid_out(t, layout):
    """t (B,H,L,D) as the case's layout holds it: "transposed" is a (B,L,H,D) buffer seen as
    (B,H,L,D), as x.view(B, L, H, D).transpose(1, 2) gives."""
    if layout == "transposed":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t
