"""The start-up server's client, which needs no torch: a worker's command line is handed over only
where a server is named and the results fd is open."""
import os

from sdpa_probe import client


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
