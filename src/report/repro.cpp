#include "report/common.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

// The input generator below must stay bit-identical to src/core/inputs.hpp (a test compares
// the --checksum output with core's make_inputs).
constexpr const char* k_template = R"PY(#!/usr/bin/env python3
# sdpa-doctor repro for one case, standalone: it needs only torch.
#   case     @CASE_ID@
#   device   @DEVICE@
#   variant  @VARIANT@ (probe @PROBE@)
#   verdict  @VERDICT@
@NOTES@#
# Prints PASS, MISMATCH, NONFINITE, UNSUPPORTED or ERROR; exits 0 only for PASS.
# `python3 this.py --checksum` prints the float64 sum of each input tensor instead.
import math
import os
import sys

# The variant's environment: PyTorch reads these once, before the first SDPA call.
@ENVIRONMENT@
import torch
import torch.nn.functional as F

CASE = dict(dtype="@DTYPE@", b=@B@, hq=@HQ@, hkv=@HKV@, lq=@LQ@, lkv=@LKV@, d=@D@,
            causal=@CAUSAL@, mask="@MASK@", layout="@LAYOUT@", seed=@SEED@)
DEVICE = "@DEVICE@"
BACKEND = "@BACKEND@"  # math, flash, mem_efficient, cudnn or default (no forcing)
FA_LIBRARY = @FA_LIBRARY@  # torch.backends.cuda.preferred_rocm_fa_library, where torch has it
ATOL, RTOL = @ATOL@, @RTOL@  # outside when |out - ref| > ATOL + RTOL * |ref|

M32 = 0xFFFFFFFF
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def hash32_int(x):
    x &= M32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & M32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & M32
    x ^= x >> 16
    return x


def hash32(x):
    # int64 tensor holding values below 2**32; products stay below 2**59.
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & M32
    return x ^ (x >> 16)


def input_key(seed, tensor):  # tensor: q=0 k=1 v=2 mask=3
    return hash32_int(hash32_int(seed & M32) ^ ((tensor * 0x9E3779B9) & M32))


def bits(key, count):
    i = torch.arange(count, dtype=torch.int64)
    return hash32(((i & M32) + key) & M32)


def unit(u):
    # (u >> 8) * 2**-23 - 1 in [-1, 1), exact in float32
    return (u >> 8).to(torch.float32) * (2.0 ** -23) - 1.0


def make_inputs(c):
    dt = DTYPES[c["dtype"]]
    b, hq, hkv, lq, lkv, d = c["b"], c["hq"], c["hkv"], c["lq"], c["lkv"], c["d"]
    q = (4.0 * unit(bits(input_key(c["seed"], 0), b * hq * lq * d))).to(dt).view(b, hq, lq, d)
    k = unit(bits(input_key(c["seed"], 1), b * hkv * lkv * d)).to(dt).view(b, hkv, lkv, d)
    v = unit(bits(input_key(c["seed"], 2), b * hkv * lkv * d)).to(dt).view(b, hkv, lkv, d)
    mask = None
    if c["mask"] != "none":
        count = b * lq * lkv
        u = bits(input_key(c["seed"], 3), count)
        if c["mask"] == "bool":
            first_key = (torch.arange(count, dtype=torch.int64) % lkv) == 0
            mask = (((u & 3) != 0) | first_key).view(b, 1, lq, lkv)
        else:
            mask = (-2.0 * (unit(u) + 1.0)).to(dt).view(b, 1, lq, lkv)
    if c["layout"] == "transposed":
        # a (B, L, H, D) buffer seen as (B, H, L, D), as x.view(B, L, H, D).transpose(1, 2) gives
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    return q, k, v, mask


def reference(q, k, v, mask, c):
    # float64 math on the CPU: QK^T * scale -> mask -> softmax -> PV; fully masked rows -> 0
    q64, k64, v64 = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    if c["hq"] != c["hkv"]:
        rep = c["hq"] // c["hkv"]
        k64, v64 = k64.repeat_interleave(rep, dim=1), v64.repeat_interleave(rep, dim=1)
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(c["d"])
    allowed = torch.ones(c["lq"], c["lkv"], dtype=torch.bool)
    if c["causal"]:
        allowed = allowed.tril()  # top-left aligned, as PyTorch's is_causal
    allowed = allowed.expand_as(scores)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask.cpu()
    elif mask is not None:
        scores = scores + mask.to("cpu", torch.float64)
    scores = scores.masked_fill(~allowed, float("-inf"))
    p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return p @ v64


def run_sdpa(q, k, v, mask, c):
    attn_mask, is_causal = mask, c["causal"]
    if mask is not None and is_causal:
        # SDPA takes a mask or is_causal, not both: fold the causal part into the mask.
        tril = torch.ones(c["lq"], c["lkv"], dtype=torch.bool, device=mask.device).tril()
        attn_mask = (mask & tril) if mask.dtype == torch.bool else mask.masked_fill(~tril, float("-inf"))
        is_causal = False
    kwargs = {"enable_gqa": True} if c["hq"] != c["hkv"] else {}
    call = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kwargs)
    if BACKEND == "default":
        return call()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    chosen = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
              "mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION}[BACKEND]
    with sdpa_kernel([chosen]):
        return call()


def main():
    q, k, v, mask = make_inputs(CASE)
    if "--checksum" in sys.argv[1:]:
        for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
            if t is not None:
                print(f"{name} {float(t.to(torch.float64).sum()).hex()}")
        return 0
    print(f"torch {torch.__version__} | {DEVICE} | {BACKEND} | {CASE}")
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print(f"ERROR: this repro needs the GPU {DEVICE}, and torch sees none")
        return 2
    device = torch.device(DEVICE)
    if FA_LIBRARY and device.type == "cuda" and hasattr(torch.backends.cuda, "preferred_rocm_fa_library"):
        torch.backends.cuda.preferred_rocm_fa_library(FA_LIBRARY)
    qd, kd, vd = (t.to(device) for t in (q, k, v))
    md = mask.to(device) if mask is not None else None
    try:
        out = run_sdpa(qd, kd, vd, md, CASE)
        if device.type == "cuda":
            torch.cuda.synchronize()
        out64 = out.detach().to("cpu", torch.float64)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "No available kernel" in str(e) or "No viable backend" in str(e):
            print(f"UNSUPPORTED: {first}")
            return 3
        print(f"ERROR: {type(e).__name__}: {first}")
        return 2
    ref = reference(q, k, v, mask, CASE)
    bad = ~torch.isfinite(out64)
    if bool((bad & torch.isfinite(ref)).any()):
        nan, inf = int(torch.isnan(out64).sum()), int(torch.isinf(out64).sum())
        print(f"NONFINITE: {nan} NaN, {inf} Inf in {out64.numel()} outputs")
        return 1
    err = (out64 - ref).abs()
    outside = err > (ATOL + RTOL * ref.abs())
    max_abs = float(err.max()) if err.numel() else 0.0
    if bool(outside.any()):
        frac = float(outside.double().mean())
        print(f"MISMATCH: max_abs_err {max_abs:.3e}, {100 * frac:.2f}% outside atol {ATOL} rtol {RTOL}")
        return 1
    print(f"PASS: max_abs_err {max_abs:.3e} (atol {ATOL}, rtol {RTOL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
)PY";

void replace_all(std::string& s, std::string_view key, std::string_view value) {
  for (size_t p = 0; (p = s.find(key, p)) != std::string::npos; p += value.size())
    s.replace(p, key.size(), value);
}

// Anything from a run that lands in the script goes into a comment: one printable line each.
std::string comment_safe(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out += (c < 0x20 || c == 0x7f) ? ' ' : ch;
  }
  return out;
}

std::string py_float(double v) {
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Used when a result carries no tolerance (hand-written case files): loose enough for the
// dtype's rounding against a float64 reference.
Tolerance fallback_tolerance(DType d) {
  switch (d) {
  case DType::f16: return {2e-3, 2e-3};
  case DType::bf16: return {1.6e-2, 1.6e-2};
  case DType::f32: return {1e-5, 1e-5};
  }
  return {1e-3, 1e-3};
}

} // namespace

std::string render_repro(const CaseResult& r) {
  std::string s = k_template;
  const Case& c = r.kase;
  std::string backend = "default";
  std::vector<std::string> notes;
  std::string environment;
  std::string fa_library = "None";
  if (auto v = parse_variant(r.variant)) {
    backend = v->backend;
    for (const auto& [k, val] : v->environment())
      environment += fmt::format("os.environ[\"{}\"] = \"{}\"\n", k, val);
    if (v->has_flag("ck")) fa_library = "\"ck\"";
    if (v->has_flag("aotriton")) fa_library = "\"aotriton\"";
  }
  if (backend == "ref-math" || backend == "ref-flash") {
    notes.push_back(fmt::format("{} is the doctor's own kernel; this script runs torch's math "
                                "backend on the same inputs instead.",
                                backend));
    backend = "math";
  }
  if (environment.empty()) environment = "# (none)\n";
  // A script written on request was never measured: a "skipped" verdict would read as a result.
  std::string verdict = r.status == Status::skipped && r.metrics.timed_runs == 0 && !r.process_end
                            ? std::string("not measured")
                            : std::string(to_string(r.status));
  if (std::string end = process_end_text(r); !end.empty()) verdict += " (" + end + ")";
  if (!r.reason.empty()) notes.push_back("reason: " + r.reason);
  for (const std::string& sig : r.signatures) notes.push_back("signature: " + sig);
  std::string notes_text;
  for (const std::string& n : notes) notes_text += "#   " + comment_safe(n) + "\n";

  Tolerance tol = r.tolerance;
  if (tol.atol <= 0 && tol.rtol <= 0) tol = fallback_tolerance(c.dtype);

  replace_all(s, "@CASE_ID@", comment_safe(r.case_id.empty() ? c.id() : r.case_id));
  replace_all(s, "@DEVICE@", comment_safe(r.device.empty() ? "cpu" : r.device));
  replace_all(s, "@VARIANT@", comment_safe(r.variant));
  replace_all(s, "@PROBE@", to_string(r.probe));
  replace_all(s, "@VERDICT@", comment_safe(verdict));
  replace_all(s, "@NOTES@", notes_text);
  replace_all(s, "@ENVIRONMENT@", environment);
  replace_all(s, "@DTYPE@", to_string(c.dtype));
  replace_all(s, "@B@", std::to_string(c.b));
  replace_all(s, "@HQ@", std::to_string(c.hq));
  replace_all(s, "@HKV@", std::to_string(c.hkv));
  replace_all(s, "@LQ@", std::to_string(c.lq));
  replace_all(s, "@LKV@", std::to_string(c.lkv));
  replace_all(s, "@D@", std::to_string(c.d));
  replace_all(s, "@CAUSAL@", c.causal ? "True" : "False");
  replace_all(s, "@MASK@", to_string(c.mask));
  replace_all(s, "@LAYOUT@", to_string(c.layout));
  replace_all(s, "@SEED@", std::to_string(c.seed));
  replace_all(s, "@BACKEND@", backend);
  replace_all(s, "@FA_LIBRARY@", fa_library);
  replace_all(s, "@ATOL@", py_float(tol.atol));
  replace_all(s, "@RTOL@", py_float(tol.rtol));
  return s;
}

} // namespace sdpa_doctor::report
