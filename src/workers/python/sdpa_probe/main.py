"""The worker's command line: a worker run, the start-up server, or the inputs test hook."""

import os
import re
import signal
import sys

from . import preflight
from .protocol import COMPILE_BACKENDS, MODES, parse_variant
from .server import serve
from .worker import dump_inputs, run_worker


def parse_args(argv):
    args = {"device": None, "variant": None, "results_fd": None, "cases": None}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("--dump-inputs",) and i + 2 < len(argv):
            args["dump"] = (argv[i + 1], argv[i + 2])
            i += 3
            continue
        if i + 1 >= len(argv):
            raise ValueError("'%s' needs a value" % flag)
        value = argv[i + 1]
        if flag == "--device":
            if not re.match(r"^(cpu|cuda:\d+)$", value):
                raise ValueError("invalid --device '%s' (cpu or cuda:N)" % value)
            args["device"] = value
        elif flag == "--variant":
            parse_variant(value)
            args["variant"] = value
        elif flag == "--results-fd":
            if not value.isdigit() or int(value) < 3:
                raise ValueError("invalid --results-fd '%s' (a descriptor >= 3)" % value)
            args["results_fd"] = int(value)
        elif flag == "--cases":
            args["cases"] = value
        elif flag == "--verify":
            if not re.match(r"^[a-z0-9+\-]+$", value):
                raise ValueError("invalid --verify '%s' (a recommendation id)" % value)
            args["verify"] = value
        elif flag == "--snippet":
            args["snippet"] = value
        elif flag == "--mode":
            if value not in MODES:
                raise ValueError("invalid --mode '%s' (eager or compiled)" % value)
            args["mode"] = value
        elif flag == "--compile":
            if value not in COMPILE_BACKENDS:
                raise ValueError("invalid --compile '%s' (%s)" % (value,
                                                                  " or ".join(COMPILE_BACKENDS)))
            args["compile"] = value
        else:
            raise ValueError("unknown argument '%s'" % flag)
        i += 2
    if "dump" in args:
        return args
    for key in ("device", "variant", "results_fd", "cases"):
        if args[key] is None:
            raise ValueError("missing --%s" % key.replace("_", "-"))
    if ("verify" in args) != ("snippet" in args):
        raise ValueError("--verify and --snippet come together")
    if "verify" in args and args["variant"] != "default":
        raise ValueError("--verify re-runs through the default dispatch: --variant default")
    args.setdefault("mode", "eager")
    if args["mode"] == "compiled":
        args.setdefault("compile", "aot_eager")
    elif "compile" in args:
        raise ValueError("--compile takes --mode compiled")
    return args


def parse_serve(argv):
    """`--serve SOCKET [--preload-backward] [--preload-causal-bias] [--preload-compile BACKEND
    COMPILED_SOCKET]`: {socket, backward, causal_bias, compile backend or None, the compiled cells'
    socket or None}; None when argv is no server's."""
    if len(argv) < 2 or argv[0] != "--serve":
        return None
    served = {"path": argv[1], "preload_backward": False, "preload_causal_bias": False,
              "preload_compile": None, "compiled_path": None}
    rest = argv[2:]
    while rest:
        if rest[0] == "--preload-backward":
            served["preload_backward"], rest = True, rest[1:]
        elif rest[0] == "--preload-causal-bias":
            served["preload_causal_bias"], rest = True, rest[1:]
        elif rest[0] == "--preload-compile" and len(rest) > 2 and rest[1] in COMPILE_BACKENDS:
            served["preload_compile"], served["compiled_path"], rest = rest[1], rest[2], rest[3:]
        else:
            return None
    return served


def run_preflight():
    """`--preflight`: what the doctor asks an interpreter before a check (preflight.py); a child
    of the start-up server answers it where one runs (__main__.py hands it over)."""
    code = preflight.report()
    sys.stdout.flush()
    os._exit(code)


def main(argv, started="exec"):
    """The exit code (most paths end in os._exit). `started`: how this process came to be the
    worker, "exec" or "forked by the start-up server"."""
    served = parse_serve(argv)
    if served is not None:
        return serve(run_main=main, **served)
    if argv == ["--preflight"]:
        return run_preflight()
    try:
        args = parse_args(argv)
    except ValueError as e:
        sys.stderr.write("sdpa_probe: %s\n" % e)
        return 2
    if "dump" in args:
        dump_inputs(args["dump"][0], args["dump"][1])
        return 0
    try:
        os.fstat(args["results_fd"])
    except OSError:
        sys.stderr.write("sdpa_probe: --results-fd %d is not open\n" % args["results_fd"])
        return 2
    if "snippet" in args and not os.access(args["snippet"], os.R_OK):
        sys.stderr.write("sdpa_probe: --snippet %s cannot be read\n" % args["snippet"])
        return 2
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    code = run_worker(args, started)
    # Every event is already written (os.write, unbuffered) and `bye` said the worker is done:
    # skip the interpreter's teardown, which unloads torch for 0.6-0.8 s per worker.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
