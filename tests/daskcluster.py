"""A real Dask cluster on loopback for tests: one ``dask scheduler`` and worker processes started
from this venv (so they import the dircleaner under test), on free ports, torn down at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
#: the worker settings the README recommends (read by every process started here)
WORKER_CONFIG = ROOT / "scripts" / "dask-worker.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LoopbackCluster:
    """``dask scheduler`` + ``workers`` × ``dask worker --nthreads 1`` (each under its nanny,
    which starts a new worker process if one is killed), with ``scripts/dask-worker.yaml``."""

    def __init__(self, log_dir: Path, workers: int = 2) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.dashboard_port = free_port()
        self.log_dir = log_dir
        self._procs: list[subprocess.Popen[bytes]] = []
        self._start(
            "scheduler",
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                self.address.rsplit(":", 1)[1],
                "--dashboard-address",
                f"127.0.0.1:{self.dashboard_port}",
            ],
        )
        for i in range(workers):
            self._start(
                f"worker{i}",
                [
                    "worker",
                    self.address,
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    "--name",
                    f"w{i}",
                ],
            )
        self.wait_for_workers(workers)

    def _start(self, name: str, args: list[str]) -> None:
        log = (self.log_dir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(BIN / "dask"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,  # torn down as a group: nanny and worker together
            env={**os.environ, "DASK_CONFIG": str(WORKER_CONFIG)},
        )
        self._procs.append(proc)

    def client(self) -> Any:
        from distributed import Client

        return Client(self.address, timeout=30, set_as_default=False)

    def wait_for_workers(self, count: int, timeout_s: float = 60.0) -> None:
        with self.client() as client:
            client.wait_for_workers(count, timeout=timeout_s)

    def worker_pids(self) -> dict[str, int]:
        """Worker address → the pid of its worker process (not the nanny)."""
        with self.client() as client:
            pids: dict[str, int] = client.run(os.getpid)
            return pids

    def close(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
