"""A bad --scheduler: one line within seconds, never a hang or a traceback at exit.

An address Dask cannot parse is a usage error (exit 2); one nobody listens on, or where
something that is no Dask scheduler answers, is an unreachable scheduler (exit 1). Each is said
on one line within 10 s, and nothing is printed after it: a half-made client used to hang for a
minute at exit and print an "Exception ignored in Client.__del__" traceback.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import invoke, write_lines

BOUND_S = 10.0


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", ["a/b/c"]))).exit_code == 0
    return url


def _nobody_listens() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"  # closed again: refused


@pytest.fixture
def not_dask() -> Iterator[str]:
    """A TCP server that answers every connection with an HTTP error, as a web server or a
    proxy on the wrong port would."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)
                time.sleep(0.2)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _run(url: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dircleaner", "--store", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - began


def _assert_one_line(done: subprocess.CompletedProcess[str], took: float) -> str:
    lines = [line for line in done.stderr.splitlines() if not line.startswith("store: ")]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert took <= BOUND_S, f"{took:.1f}s: {done.stderr}"
    return lines[0]


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("bogus", "missing port number in address 'bogus'"),
        ("tcp://scheduler-host", "missing port number"),
        ("tcp://scheduler-host:99999", "a port outside 1-65535"),
        ("foo://scheduler-host:8786", "unknown address scheme 'foo'"),
    ],
)
def test_an_address_dask_cannot_parse_is_a_usage_error(url: str, address: str, why: str) -> None:
    done, took = _run(url, "build", "--scheduler", address)
    assert done.returncode == 2, done.stderr
    line = _assert_one_line(done, took)
    assert line.startswith(f"Error: --scheduler {address!r}: ") and why in line, line
    assert line.endswith("a scheduler address is tcp://HOST:PORT (port 8786 by default)")


def test_an_address_nobody_listens_on_fails_within_seconds(url: str) -> None:
    address = _nobody_listens()
    done, took = _run(url, "run", "--scheduler", address)
    assert done.returncode == 1, done.stderr
    line = _assert_one_line(done, took)
    assert line == (
        f"Error: cannot reach the Dask scheduler at {address}: Connection refused;"
        " is 'dask scheduler' running there?"
    )


def test_an_address_where_something_else_answers_fails_within_seconds(
    url: str, not_dask: str
) -> None:
    done, took = _run(url, "sweep", "--scheduler", not_dask)
    assert done.returncode == 1, done.stderr
    line = _assert_one_line(done, took)
    assert line.startswith(f"Error: {not_dask} does not answer as a Dask scheduler does (") or (
        line.startswith(f"Error: cannot reach the Dask scheduler at {not_dask}: no answer")
    ), line
