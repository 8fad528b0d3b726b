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
def mask_shape(c):
    """The shape of the mask SDPA is given (Case::mask_shape)."""
    b, h, lq, lkv = c["b"], c["hq"], c["lq"], c["lkv"]
    return {"b1qk": (b, 1, lq, lkv), "bhqk": (b, h, lq, lkv), "11qk": (1, 1, lq, lkv),
            "qk": (lq, lkv)}[c["mask_shape"]]


def window_mask(torch, c):
    """Query i keeps keys i-W < j <= i; a row with no key in its band keeps the last key."""
    lq, lkv = c["lq"], c["lkv"]
    i = torch.arange(lq, dtype=torch.int64).reshape(lq, 1)
    j = torch.arange(lkv, dtype=torch.int64).reshape(1, lkv)
    band = (j <= i) & (j > i - c["window"])
    return band | (~band.any(dim=1, keepdim=True) & (j == lkv - 1))


def make_mask(torch, c):
    """The mask in the shape SDPA is given, its values as src/core/inputs.hpp defines them."""
    lq, lkv = c["lq"], c["lkv"]
    batches = c["b"] if c["mask_shape"] in ("b1qk", "bhqk") else 1
    if c["window"] > 0:
        values = window_mask(torch, c).expand(batches, lq, lkv)
    else:
        count = batches * lq * lkv
        u = bits(torch, input_key(c["seed"], 3), count)
        if c["mask"] == "bool":
            first_key = (torch.arange(count, dtype=torch.int64) % lkv) == 0
            values = first_key | ((u & 3) != 0)
        else:
            dt = torch_dtype(torch, c["mask_dtype"])
            values = ((unit_from_bits(torch, u) + 1.0) * -2.0).to(dt)
    values = values.reshape(batches, 1, lq, lkv)
    if c.get("masked_rows"):  # every fourth query row, from row 3, masks all its keys
        values = values.clone()
        values[:, :, 3::4, :] = False if c["mask"] == "bool" else float("-inf")
    if c["mask_shape"] == "bhqk":
        values = values.expand(-1, c["hq"], -1, -1).contiguous()  # the same for every head
    return values.reshape(mask_shape(c))


def make_inputs(torch, c):
    """q, k, v (logical B,H,L,D) in the case dtype and the mask in the shape SDPA is given (in its
    dtype) or None, on CPU."""
    dt = torch_dtype(torch, c["dtype"])
    seed = c["seed"]

    def fill(index, count, scale, shape):
        return fill_tensor(torch, dt, input_key(seed, index), count, scale).reshape(shape)

    q_scale, k_scale = (64.0, 16.0) if c["large"] else (4.0, 1.0)  # powers of two: exact
    q = fill(0, q_elements(c), q_scale, (c["b"], c["hq"], c["lq"], c["d"]))
    kv = kv_elements(c)
    k = fill(1, kv, k_scale, (c["b"], c["hkv"], c["lkv"], c["d"]))
    if c["dropout"] > 0:  # the identity: the output is the dropped, rescaled probabilities
        v = torch.eye(c["lkv"], c["d"], dtype=dt).expand(c["b"], c["hkv"], -1, -1).contiguous()
    else:
        v = fill(2, kv, 1.0, (c["b"], c["hkv"], c["lkv"], c["d"]))
    mask = make_mask(torch, c) if c["mask"] != "none" else None
    return q, k, v, mask


def make_upstream_gradient(torch, c):
    """A backward case's upstream gradient dO (logical B,Hq,Lq,D) in the case dtype, on CPU."""
    out = fill_tensor(torch, torch_dtype(torch, c["dtype"]), input_key(c["seed"], 4), q_elements(c),
                      1.0)
    return out.reshape(c["b"], c["hq"], c["lq"], c["d"])


def batch_form(c, mask):
    """The mask as (B, Lq, Lkv), the form the C++ side holds (HostInputs::mask)."""
    m = mask.reshape((1, 1) + tuple(mask.shape)) if mask.dim() == 2 else mask
    return m[:, :1].expand(c["b"], 1, c["lq"], c["lkv"])[:, 0]


def pad_value(t):
    # What a kernel that reads past a view finds there: NaN shows in its output (False in a bool
    # mask, which holds no NaN).
    return float("nan") if t.dtype.is_floating_point else False


def laid_out(t, layout, row_width=None):
    """t as `layout` holds it (Case::Layout), on t's device. transposed: a (B,L,H,D) buffer seen
    as (B,H,L,D), as x.view(B, L, H, D).transpose(1, 2) gives; strided: the first n of each row
    of a buffer `row_width` wide (2n by default); offset: one element into its storage."""
    if layout == "transposed":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    n = t.shape[-1]
    if layout == "strided":
        wide = t.new_full(tuple(t.shape[:-1]) + (row_width or 2 * n,), pad_value(t))
        wide[..., :n] = t
        return wide[..., :n]
    if layout == "offset":
        flat = t.new_full((t.numel() + 1,), pad_value(t))
        flat[1:] = t.reshape(-1)
        return flat[1:].view(t.shape)
    return t


def mask_row_width(c):
    """A strided mask's row stride: no multiple of 16 (aligned kernels pad or refuse it)."""
    return (c["lkv"] + 15) // 16 * 16 + 1


def place_inputs(torch, c, q, k, v, mask, device):
    """q, k, v and the mask on `device`, each in its layout: laid out there, since .to() of a
    strided or offset view makes it contiguous."""
    dev = torch.device(device)
    q, k, v = (laid_out(t.to(dev), c[name + "_layout"])
               for t, name in ((q, "q"), (k, "k"), (v, "v")))
    if mask is not None:
        mask = laid_out(mask.to(dev), c["mask_layout"], mask_row_width(c))
    return q, k, v, mask
