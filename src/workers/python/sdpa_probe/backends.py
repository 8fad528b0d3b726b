"""Torch's side of a worker: importing torch, one SDPA backend forced for a case (Probe) and its
facts, the canary after a case, and which exceptions are a backend's refusal."""

import contextlib
import json
import os
import sys
import time
import warnings

from .facts import gpu_truth_facts
from .inputs import place_inputs
from .oracle import RepeatCompare, dropout_seed
from .protocol import causal_offset, one_line

TORCH_BACKENDS = ("math", "flash", "mem_efficient", "cudnn", "default")


def lower_right_bias(torch, c):
    """torch.nn.attention.bias.causal_lower_right(Lq, Lkv): the attn_mask models pass for
    bottom-right causal attention (decoding, chunked prefill). A torch without it (before 2.3)
    cannot run such a case: its refusal makes the cell `unsupported`."""
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        raise RuntimeError("this PyTorch %s has no torch.nn.attention.bias.causal_lower_right: "
                           "bottom-right causal attention is not supported"
                           % getattr(torch, "__version__", "?"))
    return causal_lower_right(c["lq"], c["lkv"])


def sdpa_kwargs(torch, c, mask, gqa, device=None):
    """SDPA's keyword arguments for a case, as user code passes them: a bottom-right causal case
    hands a causal_lower_right bias as attn_mask with is_causal=False. With `device`, that bias
    as the bool mask it stands for there (lower triangle, diagonal Lkv - Lq), which is what
    torch's dispatcher can be asked about."""
    bottom_right = c["causal"] and c.get("causal_bottom_right")
    if bottom_right and device is None:
        mask = lower_right_bias(torch, c)
    elif bottom_right:
        mask = torch.ones(c["lq"], c["lkv"], dtype=torch.bool, device=device).tril(
            diagonal=causal_offset(c))
    kwargs = {"attn_mask": mask, "dropout_p": c["dropout"],
              "is_causal": bool(c["causal"] and not bottom_right)}
    if gqa:
        kwargs["enable_gqa"] = True
    return kwargs


def load_refusals():
    """The texts with which torch declines a problem cleanly, from backend_refusals.json beside
    this package: the one list the LibTorch worker is built from too."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "backend_refusals.json")
    try:
        with open(path, encoding="utf-8") as f:
            return tuple(json.load(f)["refusals"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Without the list every refusal reads as an error: loud, never a silent pass.
        sys.stderr.write("sdpa_probe: cannot read %s: %s\n" % (path, e))
        return ()


REFUSALS = load_refusals()


def canary(torch, device):
    """A 16x16 matmul of ones after a case: 'ok', or 'failed: why' (the case poisoned the device)."""
    try:
        a = torch.ones(16, 16, dtype=torch.float32, device=device)
        p = torch.mm(a, a)
        if device.startswith("cuda"):
            torch.cuda.synchronize(torch.device(device))
        total = float(p.sum().item())
        if total != 4096.0:
            return "failed: a 16x16 matmul of ones summed to %r, expected 4096" % total
        return "ok"
    except Exception as e:
        return "failed: " + one_line("%s: %s" % (type(e).__name__, e), 500)


def add_canary(result, torch, device, ran, planted=None):
    """Puts the canary after a case into its result (`planted`: a test fault's instead of the
    measured one); True when the worker must stop."""
    if not ran:
        return False
    result["canary"] = canary(torch, device)
    if planted:
        result["canary"] = planted
    return result["canary"].startswith("failed")

BACKEND_ENUM = {"math": "MATH", "flash": "FLASH_ATTENTION", "mem_efficient": "EFFICIENT_ATTENTION",
                "cudnn": "CUDNN_ATTENTION"}
CHOICE_NAMES = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "mem_efficient",
                "CUDNN_ATTENTION": "cudnn", "OVERRIDEABLE": "overrideable", "ERROR": "error"}


class Threads(object):
    """Torch's intra-op pool only for the SDPA calls: every other op here (inputs, copies, the
    float64 check) is small, and on a few shared cores waking the pool costs far more than the
    op itself (443 ms instead of 2-7 ms to build one case's inputs on 2 cores). The SDPA calls,
    the checked one and the timed ones, run with the count torch chose at start-up."""

    def __init__(self, torch):
        self.torch = torch
        self.configured = torch.get_num_threads()
        # The native pool cannot be resized once used (torch warns and keeps its size): there
        # everything runs with the configured count, as before.
        try:
            info = torch.__config__.parallel_info()
        except Exception:
            info = ""
        self.check = 1 if "parallel backend: OpenMP" in info else self.configured

    def sdpa(self):
        return _ThreadCount(self.torch, self.configured)

    def serial(self):
        return _ThreadCount(self.torch, self.check)


class _ThreadCount(object):
    def __init__(self, torch, count):
        self.torch = torch
        self.count = count

    def __enter__(self):
        self.previous = self.torch.get_num_threads()
        if self.previous != self.count:
            self.torch.set_num_threads(self.count)
        return self

    def __exit__(self, *exc):
        if self.torch.get_num_threads() != self.previous:
            self.torch.set_num_threads(self.previous)
        return False


class Probe(object):
    def __init__(self, torch, device, backend, flags, compile_backend=None):
        self.torch = torch
        self.device = device
        self.backend = backend
        self.flags = flags
        self.gpu = device.startswith("cuda")
        self.threads = Threads(torch)
        # A compiled cell's torch.compile backend ("aot_eager", "inductor"); None: eager.
        self.compile_backend = compile_backend

    def facts(self):
        torch = self.torch
        versions = {"torch": str(torch.__version__),
                    "python": "%d.%d.%d" % sys.version_info[:3]}
        hip = getattr(torch.version, "hip", None)
        if hip:
            versions["hip"] = str(hip)
        cuda = getattr(torch.version, "cuda", None)
        if cuda:
            versions["cuda"] = str(cuda)
        facts = {"rocm_build": "true" if hip else "false",
                 "python_executable": sys.executable,
                 "threads": str(self.threads.configured),
                 # The SDPA calls (checked and timed) use `threads`; the rest runs on one.
                 "timing_threads": str(self.threads.configured),
                 "check_threads": str(self.threads.check)}
        facts.update(gpu_truth_facts(torch))
        aot = self.aotriton_library()
        if aot:
            versions["aotriton"] = aot
        try:
            available = torch.cuda.is_available()
            facts["gpu_count"] = str(torch.cuda.device_count() if available else 0)
            if available:
                for i in range(torch.cuda.device_count()):
                    p = torch.cuda.get_device_properties(i)
                    facts["device_%d_name" % i] = str(p.name)
                    arch = getattr(p, "gcnArchName", None)
                    if arch:
                        facts["device_%d_gcnArchName" % i] = str(arch)
        except Exception as e:  # a broken GPU stack is a fact, not a crash
            facts["gpu_error"] = one_line(e)
        if self.compile_backend:
            facts["mode"] = "compiled"
            facts["compile_backend"] = self.compile_backend
            facts["torch_compile"] = "yes" if callable(getattr(torch, "compile", None)) else "no"
        cuda_backends = getattr(torch.backends, "cuda", None)
        pref = getattr(cuda_backends, "preferred_rocm_fa_library", None)
        if pref is not None:
            try:
                facts["preferred_rocm_fa_library"] = str(pref())
            except Exception as e:
                facts["preferred_rocm_fa_library"] = "error: " + one_line(e)
        if hip and cuda_backends is not None:
            ck = getattr(cuda_backends, "is_ck_sdpa_available", None)
            if ck is not None:
                try:
                    facts["is_ck_sdpa_available"] = "true" if ck() else "false"
                except Exception as e:
                    facts["is_ck_sdpa_available"] = "error: " + one_line(e)
        return versions, facts

    def aotriton_library(self):
        lib = os.path.join(os.path.dirname(self.torch.__file__), "lib")
        try:
            names = sorted(n for n in os.listdir(lib) if n.startswith("libaotriton_v2.so"))
        except OSError:
            return ""
        return names[-1] if names else ""

    def unavailable(self):
        """Why this (device, variant) cannot run here at all, or ''."""
        torch = self.torch
        if self.backend not in TORCH_BACKENDS:
            return "'%s' is not a torch SDPA backend" % self.backend
        if self.gpu:
            if not torch.cuda.is_available():
                return "no GPU visible to this PyTorch (torch.cuda.is_available() is False)"
            index = int(self.device.split(":")[1])
            if index >= torch.cuda.device_count():
                return "%s is not visible: PyTorch sees %d GPU(s)" % (self.device,
                                                                       torch.cuda.device_count())
        if "ck" in self.flags or "aotriton" in self.flags:
            pref = getattr(torch.backends.cuda, "preferred_rocm_fa_library", None)
            want = "ck" if "ck" in self.flags else "aotriton"
            # Selected even where it cannot matter (a CPU build keeps the setting), so the
            # worker's facts show the library each fresh process was given.
            try:
                got = pref(want) if pref is not None else None
            except Exception as e:
                got, error = None, one_line(e)
            else:
                error = ""
            if not getattr(torch.version, "hip", None):
                return ("this variant selects a ROCm flash-attention library, but this is not a "
                        "ROCm build of PyTorch")
            if pref is None:
                return "this PyTorch has no preferred_rocm_fa_library(): not supported"
            if error:
                return error
            if want not in str(got).lower():
                return ("PyTorch declined %s as the flash-attention library (preferred is %s): "
                        "not supported on this GPU or build" % (want, got))
        return ""

    def _context(self):
        torch = self.torch
        if self.backend == "default":
            return None
        attention = getattr(getattr(torch, "nn", None), "attention", None)
        kernel = getattr(attention, "sdpa_kernel", None) if attention is not None else None
        if kernel is not None:
            enum = getattr(attention.SDPBackend, BACKEND_ENUM[self.backend], None)
            if enum is None:
                raise RuntimeError("%s is not supported by this PyTorch (no SDPBackend.%s)"
                                   % (self.backend, BACKEND_ENUM[self.backend]))
            return kernel([enum])
        # torch < 2.3: the deprecated switches.
        kwargs = {"enable_flash": self.backend == "flash",
                  "enable_math": self.backend == "math",
                  "enable_mem_efficient": self.backend == "mem_efficient"}
        if self.backend == "cudnn":
            kwargs["enable_cudnn"] = True
        return torch.backends.cuda.sdp_kernel(**kwargs)

    def chosen(self, q, k, v, mask, c, gqa):
        torch = self.torch
        try:
            kwargs = sdpa_kwargs(torch, c, mask, gqa, device=q.device)
            choice = int(torch._fused_sdp_choice(q, k, v, **kwargs))
        except Exception as e:
            return "unknown (%s)" % one_line(e, 200)
        enum = getattr(getattr(torch.nn, "attention", None), "SDPBackend", None)
        if enum is not None:
            for name in CHOICE_NAMES:
                member = getattr(enum, name, None)
                if member is not None and int(member) == choice:
                    return CHOICE_NAMES[name]
        return "backend#%d" % choice

    def new_case(self):
        """Before each case of a compiled cell: Dynamo forgets the last case's graphs, so that
        its recompile limit never fails a later case that is merely another shape."""
        if self.compile_backend:
            dynamo = getattr(self.torch, "_dynamo", None)
            if dynamo is not None and hasattr(dynamo, "reset"):
                dynamo.reset()

    def attention(self, kwargs):
        """The SDPA call of a case as the cell makes it: fn(q, k, v, mask). Eager, the forced
        backend's context around torch's function; compiled, that same function (the context
        inside it, the mask an argument) through torch.compile(fullgraph=True, dynamic=False)."""
        torch = self.torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        options = {key: value for key, value in kwargs.items() if key != "attn_mask"}
        context = self._context

        def attention(q, k, v, mask):
            ctx = context()
            if ctx is None:
                return sdpa(q, k, v, attn_mask=mask, **options)
            with ctx:
                return sdpa(q, k, v, attn_mask=mask, **options)

        if not self.compile_backend:
            return attention
        compile_fn = getattr(torch, "compile", None)
        if not callable(compile_fn):
            raise RuntimeError("this PyTorch %s has no torch.compile: compiled cells cannot run"
                               % torch.__version__)
        return compile_fn(attention, fullgraph=True, dynamic=False, backend=self.compile_backend)

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize(self.torch.device(self.device))

    def run(self, line, q, k, v, mask, grad_out=None, entering_backward=None):
        """(output float32 CPU tensor, times_ms, backend_chosen, gradients, reruns, repeats). A backward
        case (grad_out given) runs its checked forward, calls entering_backward(output), then its
        backward: gradients are dq, dk, dv as float32 CPU tensors in logical order (else None);
        its timed runs are forward and backward together. A dropout case seeds the generator with
        dropout_seed(c, 0) before its checked run and a second one, dropout_seed(c, 1) before a
        third: reruns are the second and third outputs (else None). Every later call is
        measured against the first (repeats: RepeatStats; None for a dropout case, whose calls
        draw other masks), and at least two timed calls run past the budget, so that a case is
        called three times."""
        torch = self.torch
        c = line["case"]
        q, k, v, mask = place_inputs(torch, c, q, k, v, mask, self.device)
        backward = grad_out is not None
        if backward:  # leaves in the case's layouts: detach() keeps each view's strides
            q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
            grad_out = grad_out.to(torch.device(self.device))
        gqa = c["hq"] != c["hkv"]
        kwargs = sdpa_kwargs(torch, c, mask, gqa)
        chosen = self.chosen(q, k, v, mask, c, gqa) if self.backend == "default" else self.backend
        attention = self.attention(kwargs)
        attn_mask = kwargs["attn_mask"]  # the case's mask, or a bottom-right case's CausalBias

        def forward():
            return attention(q, k, v, attn_mask)

        def call():
            o = forward()
            if not backward:
                return o, None
            for t in (q, k, v):
                t.grad = None
            o.backward(grad_out)
            return o, (q.grad, k.grad, v.grad)

        # Every SDPA call back to back in one pool block: a pool woken for the timed calls alone
        # would charge its wake-up (a scheduler tick on busy cores) to the first of them.
        # Past the case's budget the warm-ups left are skipped and only the first timed run starts.
        times = []
        start, budget = time.perf_counter(), line["budget_ms"] / 1000.0

        def spent():
            return budget > 0 and time.perf_counter() - start >= budget

        grads = reruns = None
        dropout = c["dropout"] > 0
        repeats = None if dropout else RepeatCompare(
            torch, line["gradient_tolerance"], torch.are_deterministic_algorithms_enabled())

        def compare(called):  # untimed: after the clock stopped
            if repeats is not None:
                repeats.later(*called)

        with torch.enable_grad() if backward else contextlib.nullcontext(), self.threads.sdpa():
            if dropout:
                torch.manual_seed(dropout_seed(c, 0))
            out = forward()  # the checked run: its output is the one compared with the oracle
            self.sync()
            if dropout:  # the same seed again, then another: reproducible, and seeded
                torch.manual_seed(dropout_seed(c, 0))
                again = forward().detach().float().cpu().contiguous()
                torch.manual_seed(dropout_seed(c, 1))
                reruns = (again, forward().detach().float().cpu().contiguous())
            if backward:
                # The forward is measured before the backward starts: a crash from here on is the
                # backward's.
                entering_backward(out.detach().float().cpu().contiguous())
                out.backward(grad_out)
                self.sync()
                if any(t.grad is None or t.grad.shape != t.shape for t in (q, k, v)):
                    raise RuntimeError("the backward left a gradient undefined or of another shape")
                grads = tuple(t.grad.float().cpu().contiguous() for t in (q, k, v))
            if repeats is not None:
                repeats.set_first(out, grads)
            for _ in range(1, line["warmup"]):
                if spent():
                    break
                compare(call())
            self.sync()
            for i in range(line["repeat"]):
                if i > 1 and spent():
                    break
                t0 = time.perf_counter()
                called = call()
                self.sync()
                times.append((time.perf_counter() - t0) * 1000.0)
                compare(called)
        # A trailing op on the device surfaces errors a kernel left behind without raising.
        out = out.detach()
        float(out.float().sum().item())
        host = out.float().cpu().contiguous()
        return host, times, chosen, grads, reruns, repeats.stats if repeats else None


def is_graph_break(exc):
    """Dynamo could not trace the call (torch._dynamo.exc.Unsupported): under fullgraph=True a
    failure of the compiled call, never a backend's clean refusal, whatever its words say."""
    return any(t.__name__ == "Unsupported" and t.__module__.startswith("torch._dynamo")
               for t in type(exc).__mro__)


def classify(exc, captured):
    reason = one_line("%s: %s" % (type(exc).__name__, exc))
    if is_graph_break(exc):
        return "error", reason
    refusal = any(r in reason for r in REFUSALS)
    for w in captured:
        reason += " | " + one_line(w)
        refusal = refusal or any(r in w for r in REFUSALS)
    return ("unsupported" if refusal else "error"), reason


def import_torch():
    """(torch, '') or (None, why): the import, quiet about what is not SDPA's business."""
    # torch warns "Failed to initialize NumPy" when numpy is missing or broken, at import and
    # again on lazy use; it is about the environment, not SDPA, and must not reach stderr.
    warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. NumPy missing: not about SDPA
        try:
            import torch
            return torch, ""
        except Exception as e:  # ImportError, or a torch that fails to initialise
            return None, "python: %s" % one_line(e)
