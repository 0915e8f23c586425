"""``python -m dircleaner`` runs the same CLI as the ``dircleaner`` console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dircleaner.filter.generation import parse_generation_id


def module(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dircleaner", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_runs_a_command_and_says_its_name_as_the_script_does(tmp_path: Path) -> None:
    made = module("filters", "new-id", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    parse_generation_id(made.stdout.strip())  # a well-formed generation id
    helped = module("--help", cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: dircleaner [OPTIONS]")


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    bad = module("--no-such-option", cwd=tmp_path)
    assert bad.returncode == 2
    assert "No such option '--no-such-option'" in bad.stderr and bad.stdout == ""
