"""The worker side of the start-up server (server.py): the process the doctor spawned hands its
streams, results fd, argv, environment and directory to the server, which forks the child that
runs it, and ends the way that child did. Imported before anything else of the probe (standard
library only, a few milliseconds): a worker that is handed over never pays for the rest."""

import json
import os
import signal
import socket
import sys

SERVER_ENV = "SDPA_DOCTOR_PROBE_SERVER"
LOST_SERVER_EXIT = 70  # the server died while its child ran the worker


def handed_over(argv):
    """The exit code of the server's child that ran this command line; None: no server took it
    (none is named, none answers, or argv names no results fd), so it runs here."""
    server = os.environ.get(SERVER_ENV, "")
    if not server:
        return None
    if argv == ["--preflight"]:
        return run_through_server(server, argv, 1)  # its answer is on stdout
    try:
        results_fd = int(argv[argv.index("--results-fd") + 1])
    except (ValueError, IndexError):
        return None  # the command line is wrong: said where it runs
    if results_fd < 3:
        return None
    try:
        os.fstat(results_fd)
    except OSError:
        return None
    return run_through_server(server, argv, results_fd)


def read_line(conn, buf=b""):
    """One newline-terminated line from a stream socket, and the bytes after it."""
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    return line.decode("utf-8", "replace"), rest


def run_through_server(path, argv, results_fd):
    """The exit code of the server's child that ran this worker; None: run it here instead."""
    if not hasattr(socket, "send_fds"):  # Python < 3.9
        return None
    import resource
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "results_fd": results_fd,
               "rlimit_core": list(resource.getrlimit(resource.RLIMIT_CORE))}
    request["env"].pop(SERVER_ENV, None)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode("utf-8") + b"\n"],
                        [0, 1, 2, results_fd])
        line, rest = read_line(conn)
    except (OSError, EOFError):
        return None  # no server (yet, or any more): nothing ran, so run here
    if not line.startswith("forked "):
        return None
    try:
        line, _ = read_line(conn, rest)
    except (OSError, EOFError):
        sys.stderr.write("sdpa_probe: the start-up server went away while its child ran\n")
        return LOST_SERVER_EXIT
    kind, _, value = line.partition(" ")
    if kind == "signal":  # die the way the child died: the runner reads the signal
        sig = int(value)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return int(value)
