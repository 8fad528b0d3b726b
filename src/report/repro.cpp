#include "report/common.hpp"
#include "report/report.hpp"

#include "core/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

// The input generator is the Python probe's own inputs.py, pasted in at configure time
// (repro_inputs.inc, src/report/CMakeLists.txt); a test compares the --checksum output with core's
// make_inputs. Every @NAME@ is replaced by a Python literal (repro_values), never by raw text:
// what a report says is data, and stays data in the script.
constexpr const char* k_template = R"PY(#!/usr/bin/env python3
# sdpa-doctor repro for one case, standalone: it needs only torch.
# The case, device and variant are CASE, DEVICE and VARIANT below; what the doctor measured for
# them is MEASURED.
#
# Prints PASS, MISMATCH, NONFINITE, UNSUPPORTED or ERROR; exits 0 only for PASS.
# `python3 this.py --checksum` prints the float64 sum of each input tensor instead.
import math
import os
import sys

CASE_ID = @CASE_ID@
VARIANT, PROBE = @VARIANT@, @PROBE@
MEASURED = dict(verdict=@VERDICT@, notes=@NOTES@)  # the report's words, shown as they were

# The variant's environment: PyTorch reads these once, before the first SDPA call.
ENVIRONMENT = @ENVIRONMENT@
os.environ.update(ENVIRONMENT)
import torch
import torch.nn.functional as F

CASE = dict(dtype=@DTYPE@, b=@B@, hq=@HQ@, hkv=@HKV@, lq=@LQ@, lkv=@LKV@, d=@D@,
            causal=@CAUSAL@, causal_bottom_right=@CAUSAL_BOTTOM_RIGHT@, mask=@MASK@,
            layout=@LAYOUT@, seed=@SEED@,
            q_layout=@Q_LAYOUT@, k_layout=@K_LAYOUT@, v_layout=@V_LAYOUT@,
            mask_dtype=@MASK_DTYPE@, mask_shape=@MASK_SHAPE@, mask_layout=@MASK_LAYOUT@,
            window=@WINDOW@, large=@LARGE@, backward=@BACKWARD@, dropout=@DROPOUT@,
            masked_rows=@MASKED_ROWS@)
DEVICE = @DEVICE@
BACKEND = @BACKEND@  # math, flash, mem_efficient, cudnn or default (no forcing)
# None: SDPA called eagerly; else the backend of the torch.compile(fullgraph=True, dynamic=False)
# the call runs through ("aot_eager", "inductor"), the backend forced inside the compiled region
# and the mask its argument, as the doctor's compiled cells call it.
COMPILE = @COMPILE@
FA_LIBRARY = @FA_LIBRARY@  # torch.backends.cuda.preferred_rocm_fa_library, where torch has it
ATOL, RTOL = @ATOL@, @RTOL@  # outside when |out - ref| > ATOL + RTOL * |ref|
# A gradient is judged with ATOL times its largest |ref| element (at least 1), both times this.
GRADIENT_SLACK = 2.0
# Dropout (V is the identity: the output is the dropped, rescaled probabilities): probabilities
# from this size on are counted, the dropped fraction may be this many binomial sigmas from p, and
# the generator seeds of the run, its repeat under the same seed and a run under another seed.
DROPOUT_MIN_PROBABILITY, DROPOUT_SIGMAS = 1e-3, 6.0
DROPOUT_SEEDS = (0x5d0c0000 + 2 * CASE["seed"], 0x5d0c0000 + 2 * CASE["seed"] + 1)

)PY"
#include "report/repro_inputs.inc"
R"PY(

def zero_for_masked_rows():
    # A query row with no key to attend to: 0 from torch 2.5 on (SDPA's _safe_softmax), NaN before
    try:
        return tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)
    except ValueError:
        return True


def reference(q, k, v, mask, c):
    # float64 math on the CPU: QK^T * scale -> mask -> softmax -> PV; fully masked rows -> 0, or
    # NaN as torch < 2.5 gives them
    q64, k64, v64 = (t.to("cpu", torch.float64) for t in (q, k, v))
    if c["hq"] != c["hkv"]:
        rep = c["hq"] // c["hkv"]
        k64, v64 = k64.repeat_interleave(rep, dim=1), v64.repeat_interleave(rep, dim=1)
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(c["d"])
    allowed = torch.ones(c["lq"], c["lkv"], dtype=torch.bool)
    if c["causal"]:
        # top-left aligned as PyTorch's is_causal, or bottom-right as its causal_lower_right
        allowed = allowed.tril(diagonal=causal_offset(c))
    allowed = allowed.expand_as(scores)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask.cpu()
    elif mask is not None:
        scores = scores + mask.to("cpu", torch.float64)
    scores = scores.masked_fill(~allowed, float("-inf"))
    # A row with no key left: softmax over zeros, then dropped (no NaN, not even in a gradient)
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    out = p @ v64
    if not zero_for_masked_rows():
        out = out.masked_fill(empty, float("nan"))
    return out


def reference_gradients(q, k, v, mask, c, dout):
    # float64 autograd through reference() for the same upstream gradient
    q64, k64, v64 = (t.detach().to("cpu", torch.float64).requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = reference(q64, k64, v64, mask, c)
        keep = torch.isfinite(out)  # fully masked rows under torch < 2.5: dq NaN there
        dq, dk, dv = torch.autograd.grad(out.masked_fill(~keep, 0.0), (q64, k64, v64),
                                         dout.to(torch.float64))
        return dq.masked_fill(~keep.all(dim=-1, keepdim=True), float("nan")), dk, dv


def judge(name, got, ref, atol, rtol):
    # (exit code, verdict line) of one tensor against its float64 reference
    label = "" if name == "output" else f" in backward ({name})"
    bad = ~torch.isfinite(got)
    if bool((bad & torch.isfinite(ref)).any()):
        nan, inf = int(torch.isnan(got).sum()), int(torch.isinf(got).sum())
        return 1, f"NONFINITE{label}: {nan} NaN, {inf} Inf in {got.numel()} values"
    expected_nan = torch.isnan(ref)  # fully masked rows, as this torch (< 2.5) gives them
    if bool((expected_nan & ~torch.isnan(got)).any()):
        n = int((expected_nan & ~torch.isnan(got)).sum())
        return 1, (f"MISMATCH{label}: {n} of {int(expected_nan.sum())} values in fully masked "
                   f"rows are finite where torch < 2.5 returns NaN")
    err = (got - ref).abs().masked_fill(expected_nan, 0.0)
    outside = err > (atol + rtol * ref.abs())
    max_abs = float(err.max()) if err.numel() else 0.0
    if bool(outside.any()):
        frac = float(outside.double().mean())
        return 1, (f"MISMATCH{label}: max_abs_err {max_abs:.3e}, {100 * frac:.2f}% outside "
                   f"atol {atol:.3g} rtol {rtol:.3g}")
    return 0, f"PASS{label}: max_abs_err {max_abs:.3e} (atol {atol:.3g}, rtol {rtol:.3g})"


def judge_dropout(out, again, other, probs, p, atol, rtol):
    # (exit code, verdict line): each element 0 or its probability / (1 - p); the dropped
    # fraction near p; the same seed reproduces the output, another seed changes it
    if not bool(torch.isfinite(out).all()):
        return 1, f"NONFINITE: {int(torch.isnan(out).sum())} NaN, {int(torch.isinf(out).sum())} Inf"
    kept, scaled = out != 0, probs / (1 - p)
    outside = kept & ((out - scaled).abs() > atol + rtol * scaled)
    problems = []
    if bool(outside.any()):
        problems.append(f"{int(outside.sum())} elements neither 0 nor probability / (1 - p)")
    counts = probs >= DROPOUT_MIN_PROBABILITY
    n, dropped = int(counts.sum()), int((counts & ~kept).sum())
    bound = DROPOUT_SIGMAS * math.sqrt(n * p * (1 - p)) + 1
    if n >= 200 and abs(dropped - p * n) > bound:
        problems.append(f"{100 * dropped / n:.2f}% dropped, expected {100 * p:g}% +/- {100 * bound / n:.2f}%")
    if not torch.equal(out, again):
        problems.append("not reproducible under the same seed")
    if torch.equal(out, other) and bool(kept.any()):
        problems.append("the seed is ignored")
    if problems:
        return 1, "MISMATCH in dropout: " + "; ".join(problems)
    return 0, (f"PASS in dropout: {100 * dropped / max(n, 1):.2f}% of {n} probabilities dropped "
               f"(p = {p:g}), reproducible under its seed")


def causal_offset(c):
    # query i sees key j <= i + this under causal: 0 top-left, Lkv - Lq bottom-right
    return c["lkv"] - c["lq"] if c["causal"] and c["causal_bottom_right"] else 0


def run_sdpa(q, k, v, mask, c):
    attn_mask, is_causal = mask, c["causal"]
    if mask is not None and is_causal:
        # SDPA takes a mask or is_causal, not both: fold the causal part into the mask.
        tril = torch.ones(c["lq"], c["lkv"], dtype=torch.bool, device=mask.device).tril(causal_offset(c))
        attn_mask = (mask & tril) if mask.dtype == torch.bool else mask.masked_fill(~tril, float("-inf"))
        is_causal = False
    elif is_causal and c["causal_bottom_right"]:
        # Bottom-right causal (decoding, chunked prefill) as models ask for it: a CausalBias as
        # attn_mask (torch >= 2.3)
        from torch.nn.attention.bias import causal_lower_right
        attn_mask, is_causal = causal_lower_right(c["lq"], c["lkv"]), False
    kwargs = {"enable_gqa": True} if c["hq"] != c["hkv"] else {}
    kernel = None
    if BACKEND != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kernel = sdpa_kernel, {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
                               "mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
                               "cudnn": SDPBackend.CUDNN_ATTENTION}[BACKEND]

    def attention(q, k, v, attn_mask):
        if kernel is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                                  dropout_p=c["dropout"], **kwargs)
        with kernel[0]([kernel[1]]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                                  dropout_p=c["dropout"], **kwargs)

    if COMPILE:
        attention = torch.compile(attention, fullgraph=True, dynamic=False, backend=COMPILE)
    return attention(q, k, v, attn_mask)


def main():
    q, k, v, mask = make_inputs(torch, CASE)
    if "--checksum" in sys.argv[1:]:
        host_mask = batch_form(CASE, mask) if mask is not None else None
        for name, t in (("q", q), ("k", k), ("v", v), ("mask", host_mask)):
            if t is not None:
                print(f"{name} {float(t.to(torch.float64).sum()).hex()}")
        return 0
    compiled = f" | torch.compile(backend={COMPILE!r})" if COMPILE else ""
    print(f"torch {torch.__version__} | {DEVICE} | {BACKEND}{compiled} | {CASE_ID}")
    print(f"sdpa-doctor measured {VARIANT} ({PROBE}) here: {MEASURED['verdict']}")
    for note in MEASURED["notes"]:
        print(f"  {note}")
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print(f"ERROR: this repro needs the GPU {DEVICE}, and torch sees none")
        return 2
    device = torch.device(DEVICE)
    if FA_LIBRARY and device.type == "cuda" and hasattr(torch.backends.cuda, "preferred_rocm_fa_library"):
        torch.backends.cuda.preferred_rocm_fa_library(FA_LIBRARY)
    # Each tensor in its layout on the device, the mask in its shape, dtype and layout.
    qd, kd, vd, md = place_inputs(torch, CASE, q, k, v, mask, DEVICE)
    backward = CASE["backward"]
    if backward:  # the forward, then the backward for the seeded upstream gradient
        qd, kd, vd = (t.detach().requires_grad_(True) for t in (qd, kd, vd))
        dout = make_upstream_gradient(torch, CASE)
    dropout = CASE["dropout"] > 0
    try:
        if dropout:  # the run, its repeat under the same seed, and one under another seed
            outs = []
            for seed in (DROPOUT_SEEDS[0], DROPOUT_SEEDS[0], DROPOUT_SEEDS[1]):
                torch.manual_seed(seed)
                outs.append(run_sdpa(qd, kd, vd, md, CASE).to("cpu", torch.float64))
        else:  # one run, judged element by element
            with torch.enable_grad():
                out = run_sdpa(qd, kd, vd, md, CASE)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                out64 = out.detach().to("cpu", torch.float64)
                if backward:
                    out.backward(dout.to(device))
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    grads64 = [t.grad.to("cpu", torch.float64) for t in (qd, kd, vd)]
    except ImportError as e:  # a torch before causal_lower_right (2.3)
        print(f"UNSUPPORTED: this torch cannot run bottom-right causal attention: {e}")
        return 3
    except (RuntimeError, AssertionError) as e:  # torch.compile's failures are of both kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "No available kernel" in str(e) or "No viable backend" in str(e):
            print(f"UNSUPPORTED: {first}")
            return 3
        print(f"ERROR: {type(e).__name__}: {first}")
        return 2
    if dropout:
        code, line = judge_dropout(*outs, reference(q, k, v, mask, CASE), CASE["dropout"], ATOL, RTOL)
        print(line)
        return code
    verdicts = [judge("output", out64, reference(q, k, v, mask, CASE), ATOL, RTOL)]
    if backward:
        refs = reference_gradients(q, k, v, mask, CASE, dout)
        for name, got, ref in zip(("dq", "dk", "dv"), grads64, refs):
            scale = max(1.0, float(ref.nan_to_num().abs().max())) if ref.numel() else 1.0
            verdicts.append(judge(name, got, ref, ATOL * scale * GRADIENT_SLACK,
                                  RTOL * GRADIENT_SLACK))
    for code, line in sorted(verdicts, key=lambda v: -v[0]):  # a failure first
        print(line)
    return max(code for code, _ in verdicts)


if __name__ == "__main__":
    sys.exit(main())
)PY";

// The template with each @NAME@ replaced, in one pass over the template alone: a value is never
// searched again, so a value holding "@NAME@" stays the text it is.
std::string fill(std::string_view templ, const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  size_t p = 0;
  while (p < templ.size()) {
    const size_t at = templ.find('@', p);
    if (at == std::string_view::npos) break;
    const size_t end = templ.find('@', at + 1);
    if (end == std::string_view::npos) break;
    const std::string_view key = templ.substr(at, end - at + 1);
    const auto value = std::find_if(values.begin(), values.end(),
                                    [&](const auto& kv) { return kv.first == key; });
    out.append(templ.substr(p, at - p));
    if (value == values.end()) { // an '@' of the template's own text
      out += '@';
      p = at + 1;
      continue;
    }
    out += value->second;
    p = end + 1;
  }
  out.append(templ.substr(p));
  return out;
}

// A double-quoted Python string literal of printable ASCII: quotes and backslashes escaped, every
// other character (controls, line separators, anything past ASCII) as \xNN, \uNNNN or \UNNNNNNNN,
// bytes that are not UTF-8 as the replacement character.
std::string py_str(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '"' || c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(text, i);
    std::uint32_t cp = 0xFFFD;
    if (n == 1) cp = c;
    else if (n > 1) {
      cp = c & (0x7F >> n);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    out += cp < 0x100 ? fmt::format("\\x{:02x}", cp)
           : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                          : fmt::format("\\U{:08x}", cp);
    i += n == 0 ? 1 : n;
  }
  return out + "\"";
}

std::string py_tuple(const std::vector<std::string>& items) {
  std::string out = "(";
  for (const std::string& item : items) out += py_str(item) + ", ";
  return out + ")";
}

std::string py_float(double v) {
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Used when a result carries no usable tolerance (hand-written case files): loose enough for the
// dtype's rounding against a float64 reference.
Tolerance fallback_tolerance(DType d) {
  switch (d) {
  case DType::f16: return {2e-3, 2e-3};
  case DType::bf16: return {1.6e-2, 1.6e-2};
  case DType::f32: return {1e-5, 1e-5};
  }
  return {1e-3, 1e-3};
}

bool usable(const Tolerance& t) {
  return std::isfinite(t.atol) && std::isfinite(t.rtol) && t.atol >= 0 && t.rtol >= 0 &&
         (t.atol > 0 || t.rtol > 0);
}

bool valid_device(std::string_view d) {
  if (d == "cpu") return true;
  if (d.substr(0, 5) != "cuda:" || d.size() == 5 || d.size() > 9) return false;
  return d.find_first_not_of("0123456789", 5) == std::string_view::npos;
}

} // namespace

Expected<std::vector<std::pair<std::string, std::string>>> repro_values(
    const CaseResult& r, std::string_view compile_backend) {
  const auto refuse = [](std::string_view field, std::string_view value, std::string_view known) {
    return make_error(escape_to_one_line(
        fmt::format("{} '{}' is not one the doctor knows ({})", field, value, known)));
  };
  auto variant = parse_variant(r.variant);
  if (!variant) return make_error(escape_to_one_line(variant.error().message));
  const std::string device = r.device.empty() ? "cpu" : r.device;
  if (!valid_device(device)) return refuse("device", device, "cpu or cuda:N");
  if (r.probe == Probe::fault) return refuse("probe", "fault", "libtorch, python or reference");
  // The script rebuilds the case from its id: a result whose id and case disagree is not ours.
  const Case& c = r.kase;
  if (!r.case_id.empty() && r.case_id != c.id()) {
    auto from_id = parse_case_id(r.case_id);
    if (!from_id || !(*from_id == c)) return refuse("case id", r.case_id, "the id of its case");
  }
  if (!parse_case_id(c.id())) return refuse("case", c.id(), "a case the doctor plans");
  if (r.mode == Mode::compiled && compile_backend != "aot_eager" && compile_backend != "inductor")
    return refuse("compile backend", compile_backend, "aot_eager or inductor");

  std::string backend = variant->backend;
  std::vector<std::string> notes;
  std::vector<std::string> environment;
  std::string fa_library = "None";
  for (const auto& [k, val] : variant->environment())
    environment.push_back(py_str(k) + ": " + py_str(val));
  if (variant->has_flag("ck")) fa_library = py_str("ck");
  if (variant->has_flag("aotriton")) fa_library = py_str("aotriton");
  if (backend == "ref-math" || backend == "ref-flash") {
    notes.push_back(fmt::format("{} is the doctor's own kernel; this script runs torch's math "
                                "backend on the same inputs instead.",
                                backend));
    backend = "math";
  }
  // A script written on request was never measured: a "skipped" verdict would read as a result.
  std::string verdict = r.status == Status::skipped && r.metrics.timed_runs == 0 && !r.process_end
                            ? std::string("not measured")
                            : std::string(to_string(r.status));
  if (std::string end = process_end_text(r); !end.empty()) verdict += " (" + end + ")";
  if (!r.reason.empty()) notes.push_back("reason: " + r.reason);
  for (const std::string& sig : r.signatures) notes.push_back("signature: " + sig);
  const Tolerance tol = usable(r.tolerance) ? r.tolerance : fallback_tolerance(c.dtype);

  return std::vector<std::pair<std::string, std::string>>{
      {"@CASE_ID@", py_str(c.id())},
      {"@VARIANT@", py_str(variant->name())},
      {"@PROBE@", py_str(to_string(r.probe))},
      {"@VERDICT@", py_str(verdict)},
      {"@NOTES@", py_tuple(notes)},
      {"@ENVIRONMENT@", fmt::format("{{{}}}", fmt::join(environment, ", "))},
      {"@DTYPE@", py_str(to_string(c.dtype))},
      {"@B@", std::to_string(c.b)},
      {"@HQ@", std::to_string(c.hq)},
      {"@HKV@", std::to_string(c.hkv)},
      {"@LQ@", std::to_string(c.lq)},
      {"@LKV@", std::to_string(c.lkv)},
      {"@D@", std::to_string(c.d)},
      {"@CAUSAL@", c.causal ? "True" : "False"},
      {"@CAUSAL_BOTTOM_RIGHT@", c.causal && c.causal_bottom_right ? "True" : "False"},
      {"@MASK@", py_str(to_string(c.mask))},
      {"@LAYOUT@", py_str(to_string(c.layout))},
      {"@Q_LAYOUT@", py_str(to_string(c.qkv_layouts()[0]))},
      {"@K_LAYOUT@", py_str(to_string(c.qkv_layouts()[1]))},
      {"@V_LAYOUT@", py_str(to_string(c.qkv_layouts()[2]))},
      {"@MASK_DTYPE@", py_str(to_string(c.mask_value_dtype()))},
      {"@MASK_SHAPE@", py_str(to_string(c.mask_shape))},
      {"@MASK_LAYOUT@", py_str(to_string(c.mask_layout))},
      {"@WINDOW@", std::to_string(c.window)},
      {"@LARGE@", c.large ? "True" : "False"},
      {"@MASKED_ROWS@", c.masked_rows ? "True" : "False"},
      {"@SEED@", std::to_string(c.seed)},
      {"@BACKWARD@", c.backward ? "True" : "False"},
      {"@DROPOUT@", py_float(c.dropout_p())},
      {"@DEVICE@", py_str(device)},
      {"@BACKEND@", py_str(backend)},
      {"@COMPILE@", r.mode == Mode::compiled ? py_str(compile_backend) : "None"},
      {"@FA_LIBRARY@", fa_library},
      {"@ATOL@", py_float(tol.atol)},
      {"@RTOL@", py_float(tol.rtol)},
  };
}

std::string_view repro_template() { return k_template; }

std::string compile_backend_of(const Report& report, const CaseResult& r) {
  for (const WorkerInfo& w : report.workers)
    if (w.device == r.device && w.probe == r.probe && w.variant == r.variant && w.mode == r.mode)
      if (auto f = w.facts.find("compile_backend"); f != w.facts.end()) return f->second;
  return "aot_eager";
}

Expected<std::string> render_repro(const CaseResult& r, std::string_view compile_backend) {
  auto values = repro_values(r, compile_backend);
  if (!values) return values.error();
  return fill(k_template, *values);
}

} // namespace sdpa_doctor::report
