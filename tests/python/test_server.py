"""The start-up server's pieces that need no torch: its warm-ups run in the idle scheduling class
and leave it, and a worker's command line is handed over only where a server is named and the
results fd is open."""
import os

import pytest

from sdpa_probe import client, server


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE here")
def test_a_warm_up_runs_idle_and_the_server_is_normal_again_after_it():
    before = os.sched_getscheduler(0)
    with server.only_when_idle():
        assert os.sched_getscheduler(0) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER == before


def test_a_worker_is_handed_over_only_where_a_server_is_named(monkeypatch, tmp_path):
    argv = ["--device", "cpu", "--variant", "math", "--results-fd", "1", "--cases", "c"]
    monkeypatch.delenv(client.SERVER_ENV, raising=False)
    assert client.handed_over(argv) is None  # no server: it runs itself
    monkeypatch.setenv(client.SERVER_ENV, str(tmp_path / "none.sock"))
    assert client.handed_over(argv) is None  # fd 1 is no results fd: said where it runs
    r, w = os.pipe()
    try:
        argv[5] = str(w)
        assert client.handed_over(argv) is None  # nothing listens there: it runs itself
        argv[5] = "99"
        assert client.handed_over(argv) is None  # not open
    finally:
        os.close(r)
        os.close(w)
