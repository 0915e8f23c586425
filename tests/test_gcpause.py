"""The cyclic GC is paused through a pass and left as it was found."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dircleaner.gcpause import cyclic_gc_paused


@pytest.fixture(autouse=True)
def _gc_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_inside_and_restored_after(enabled: bool) -> None:
    gc.enable() if enabled else gc.disable()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() == enabled


def test_restored_when_the_pass_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_nested_pauses_restore_the_outer_state() -> None:
    gc.enable()
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # the inner pause found it paused and left it so
    assert gc.isenabled()
