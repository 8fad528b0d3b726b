"""The start-up server: one interpreter that imported torch, forking a fresh child per worker."""

import json
import os
import selectors
import signal
import socket
import sys

from .backends import import_torch
from .client import read_line
from .protocol import one_line

# `import torch` costs 1-2 s of CPU in every worker. The doctor starts one server per run
# (`--serve SOCKET`) that imports torch once and never touches a GPU or runs an op. Each worker the
# runner spawns connects, hands over its standard streams and results fd, and the server forks a
# child that becomes that worker: a fresh process, its environment replaced by the worker's before
# SDPA is first called, so the variables torch latches on first use and the FA library chosen
# there are the child's own. The worker the runner spawned waits and then exits the way the child
# did (its code, or its signal), so the runner's isolation, deadlines and crash attribution are
# unchanged. Where the server cannot be reached, or forking is unsafe, the worker runs itself.



def set_parent_death_signal():
    """Dies with SIGKILL when the parent does (Linux): no worker outlives a killed doctor."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def other_threads():
    """Names of the threads beside this one (forking copies one thread only: with another alive,
    a lock it holds may stay held forever in the child); None when they cannot be listed."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    names = []
    for t in tasks:
        if int(t) == threading_native_id():
            continue
        try:
            with open("/proc/self/task/%s/comm" % t) as f:
                names.append(f.read().strip())
        except OSError:
            names.append(t)
    return names


def threading_native_id():
    import threading
    return threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()


def become_worker(request, fds, run_main):
    """In the forked child: take the worker's streams, environment and limits, then run it."""
    set_parent_death_signal()
    normal_priority()  # a worker runs in the normal class, whatever its server's
    targets = [0, 1, 2, int(request["results_fd"])]
    top = max(targets) + 1
    moved = [fcntl_dup_above(fd, top) for fd in fds]  # no dup2 may clobber a source still needed
    for fd in fds:
        os.close(fd)
    for source, target in zip(moved, targets):
        os.dup2(source, target)
        os.close(source)
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, tuple(request["rlimit_core"]))
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGIO):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [sys.argv[0]] + request["argv"]
    run_main(request["argv"], "forked by the start-up server")  # ends in os._exit


def fcntl_dup_above(fd, lowest):
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD, lowest)


def preload_backward_imports():
    """What torch's first backward imports lazily (symbolic shapes, sympy: a third of a second),
    imported once here instead of in every forked worker. Pure Python: no thread starts."""
    try:
        import torch.fx.experimental.symbolic_shapes  # noqa: F401
    except Exception:  # an older or newer torch without it: the workers import what they need
        pass


def preload_causal_bias_imports():
    """What a bottom-right causal case imports (torch.nn.attention.bias, and Dynamo with it: most
    of a second), imported once here. Pure Python: no thread starts."""
    try:
        import torch.nn.attention.bias  # noqa: F401
    except Exception:  # a torch without it: the workers say the case is unsupported
        pass


def preload_compile_imports(torch, backend):
    """Warms Dynamo for compiled cells: its modules imported and one tiny function traced by
    `backend` (a cold first compile costs a second, which every forked worker would otherwise
    pay). Nothing runs on a GPU; the op runs below the size at which torch wakes its thread
    pool, and an Inductor warm-up stops at tracing, before it would start its compile workers."""
    try:
        import torch._dynamo  # noqa: F401

        sdpa = torch.nn.functional.scaled_dot_product_attention

        def warm(q):
            return sdpa(q, q, q, is_causal=True) * 2 + 1

        # A tiny SDPA forward and backward: what the compiled cells' first trace would import
        # (decompositions, AOTAutograd's joint graph and partitioner) is imported here once.
        trace_backend = backend if backend == "aot_eager" else "aot_eager"
        compiled = torch.compile(warm, fullgraph=True, dynamic=False, backend=trace_backend)
        q = torch.ones(1, 1, 4, 4, requires_grad=True)
        compiled(q).sum().backward()
        if backend == "inductor":
            import torch._inductor.compile_fx  # noqa: F401
        torch._dynamo.reset()
    except Exception:  # the workers compile on their own, and say what fails there
        pass


def serve(path, run_main, preload_backward=False, preload_compile=None, compiled_path=None,
          preload_causal_bias=False):
    """Accepts workers until the doctor kills the server's process group; each child calls
    run_main(argv, started) as the worker it becomes. `preload_backward`: the check runs backward
    cases; `preload_causal_bias`: bottom-right causal ones; `preload_compile`: it runs compiled
    cells under that torch.compile backend, served by a second server at `compiled_path` that this
    one forks once it has imported the rest."""
    set_parent_death_signal()
    listener = listen(path)  # before the import: early workers wait in the backlog
    # torch imports numpy where it is installed, and OpenBLAS starts a thread per core at load:
    # with them alive this process could not fork. The probe never calls numpy; a child gets its
    # own environment back, and only numpy's BLAS pool (one thread) from here.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch, why = import_torch()
    if torch is None:
        return refuse(listener, path, why)
    if not fork_safe():
        return refuse(listener, path, why_not_fork_safe())
    # The pre-flight and the first workers need torch only: they are served from now on, and what
    # later cells need is imported between their requests. Dynamo's warm-up takes seconds: a
    # second server forked from this one does it and serves the compiled cells, while this one
    # serves the eager workers.
    children = {}  # pid -> the worker's connection
    warm_ups = []  # each called with the loop's listener and selector
    if preload_backward:
        warm_ups.append(lambda *_: preload_backward_imports())
    if preload_causal_bias:
        warm_ups.append(lambda *_: preload_causal_bias_imports())
    if preload_compile and compiled_path:
        warm_ups.append(lambda *loop: fork_compiled_server(compiled_path, run_main, torch,
                                                           preload_compile, children, loop))
    return serve_forever(listener, path, run_main, warm_ups, children)


def listen(path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    return listener


def refuse(listener, path, why):
    """Not serving: the workers then run themselves."""
    sys.stderr.write("sdpa_probe: not serving: %s\n" % why)
    listener.close()
    try:
        os.unlink(path)
    except OSError:
        pass
    return 1


def fork_safe():
    return other_threads() == []


def why_not_fork_safe():
    return "threads alive after import: %s" % ", ".join(other_threads() or ["unknown"])


def fork_compiled_server(path, run_main, torch, backend, children, loop):
    """Forks the server of the compiled cells: it listens at `path` at once (compiled workers that
    come early wait in its backlog), warms Dynamo, then serves. Nothing of the first server's
    (`loop`: its listener and selector, `children`: its workers) is this one's business."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        return
    try:
        set_parent_death_signal()
        for thing in list(children.values()) + list(loop):
            thing.close()
        children.clear()
        close_wakeup()
        listener = listen(path)
        with only_while_no_one_asks(listener):
            preload_compile_imports(torch, backend)
        if not fork_safe():
            os._exit(refuse(listener, path, why_not_fork_safe()))
        os._exit(serve_forever(listener, path, run_main, [], children))
    except BaseException as e:  # never back into the first server's loop
        os.write(2, ("sdpa_probe: the compiled cells' server failed: %s\n" % one_line(e)).encode())
        os._exit(1)


_wakeup = []  # the pipe a SIGCHLD writes to: a finished worker is told at once, not at a poll


def open_wakeup():
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    # A handler, so that the wake-up fd is written; and a warm-up it interrupts (SCHED_IDLE) goes
    # on in the normal class, so that the worker that ended is told soon whatever the load.
    signal.signal(signal.SIGCHLD, normal_priority)
    signal.set_wakeup_fd(w)
    _wakeup[:] = [r, w]
    return r


def close_wakeup():
    """In a forked process: the signals are its own again, the pipe is not."""
    if not _wakeup:
        return
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in _wakeup:
        os.close(fd)
    del _wakeup[:]


def set_policy(name):
    try:
        os.sched_setscheduler(0, getattr(os, name), os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or not allowed here: as it was
        pass


def normal_priority(*_):
    """SCHED_OTHER again: Linux allows it without privilege (the nice value never changed)."""
    set_policy("SCHED_OTHER")


class only_while_no_one_asks:
    """Runs a warm-up under SCHED_IDLE, so that the timed workers running meanwhile keep the CPU,
    until a worker connects or a child ends: the listener's SIGIO (or SIGCHLD) puts this process
    back in the normal class at once, so that no worker waits on a starved warm-up (a machine busy
    on every core would otherwise give it nothing)."""

    def __init__(self, listener):
        self.listener = listener

    def __enter__(self):
        try:
            import fcntl
            fd = self.listener.fileno()
            signal.signal(signal.SIGIO, normal_priority)
            fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        except (ImportError, AttributeError, OSError, ValueError):
            return  # no signal to end it: the warm-up runs in the normal class
        set_policy("SCHED_IDLE")
        if self.pending():  # asked before the signal was armed
            normal_priority()

    def pending(self):
        import select
        return bool(select.select([self.listener], [], [], 0)[0])

    def __exit__(self, *_):
        normal_priority()


def serve_forever(listener, path, run_main, warm_ups, children):
    """Forks a child per request; while no request waits, runs the next of `warm_ups` (each
    followed by the check that forking stays safe: one that leaves a thread alive ends the
    serving)."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    wake = open_wakeup()
    sel.register(wake, selectors.EVENT_READ)
    while True:
        events = sel.select(timeout=0 if warm_ups else None)
        for key, _ in events:
            if key.fileobj is listener:
                conn, _ = listener.accept()
                pid = start_child(conn, listener, sel, run_main)
                if pid:
                    children[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
            elif key.fileobj == wake:
                try:
                    while os.read(wake, 512):
                        pass
                except OSError:  # drained
                    pass
            else:  # the worker sends nothing after its request: readable means it went away
                try:
                    os.kill(key.data, signal.SIGKILL)
                except OSError:
                    pass
        reap(children, sel)
        # A warm-up blocks this loop for up to a second: a request, or a child's end, waits for
        # one step at most (they end its idle class).
        if not events and warm_ups:
            with only_while_no_one_asks(listener):
                warm_ups.pop(0)(listener, sel)
            if not fork_safe():  # serve no more: the workers that come run themselves
                sys.stderr.write("sdpa_probe: not serving any more: %s\n" % why_not_fork_safe())
                sel.unregister(listener)
                listener.close()
                os.unlink(path)
                del warm_ups[:]


def start_child(conn, listener, sel, run_main):
    """Forks the child for one worker's request; its pid, or 0 when the request was bad."""
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
        line, _ = read_line(conn, data)
        request = json.loads(line)
        if len(fds) != 4:
            raise ValueError("expected 4 descriptors, got %d" % len(fds))
        conn.settimeout(None)
    except (OSError, ValueError, EOFError) as e:
        sys.stderr.write("sdpa_probe: bad request: %s\n" % one_line(e))
        conn.close()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            sel.close()
            conn.close()
            close_wakeup()
            become_worker(request, fds, run_main)
        except BaseException as e:  # the child must never return into the server's loop
            os.write(2, ("sdpa_probe: forked worker failed: %s\n" % one_line(e)).encode())
        os._exit(LOST_SERVER_EXIT)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(b"forked %d\n" % pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return pid


def reap(children, sel):
    """Tells each finished child's worker how the child ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            message = b"signal %d\n" % os.WTERMSIG(status)
        else:
            message = b"exit %d\n" % os.WEXITSTATUS(status)
        sel.unregister(conn)
        try:
            conn.sendall(message)
        except OSError:
            pass
        conn.close()
