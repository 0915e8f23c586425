"""``list-dirs``: every bucket unless told, and output piped into a reader that stops early
(`| head`): a quiet exit, no error, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import invoke

# Much more than a pipe's buffer (64 KiB), so the writer meets the closed pipe.
KEYS = "".join(f"some/longer/directory/name/{i:06d}/object\n" for i in range(5000))


def test_list_dirs_into_head_stops_quietly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", "-", input=KEYS).exit_code == 0
    command = [sys.executable, "-m", "dircleaner", "--store", url, "list-dirs"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"default\t")
    proc.stdout.close()  # what `head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=60), err) == (141, "")


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(store, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="p/q\n").exit_code == 0
    return store


def test_list_dirs_covers_every_bucket_like_run(url: str) -> None:
    result = invoke(url, "list-dirs", "--sort")
    assert (result.exit_code, result.output) == (
        0,
        "default\ta/\ndefault\ta/b/\ndefault\ta/c/\nphotos\tp/\n",
    )
    result = invoke(url, "list-dirs", "--bucket", "photos")
    assert (result.exit_code, result.output) == (0, "p/\n")
