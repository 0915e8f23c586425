"""Collect ``bench_*.py`` files too, so ``pytest bench/ --benchmark-only`` finds them."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Module | None:
    """Treat ``bench_*.py`` as test modules (explicitly named files are collected anyway)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    if parent.session.isinitpath(file_path):
        return None
    return pytest.Module.from_parent(parent, path=file_path)
