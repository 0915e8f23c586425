"""errors.py: each error's exit code is one the README's table explains, usage errors exit 2,
refusals 3, and the details an error carries for ``--json`` are its own."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from dircleaner import errors
from dircleaner.errors import DircleanerError, GuardRefused, UsageError

README = Path(__file__).resolve().parent.parent / "README.md"


def error_classes() -> list[type[DircleanerError]]:
    return [
        cls
        for _name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, DircleanerError) and cls.__module__ == errors.__name__
    ]


def documented_exit_codes() -> set[int]:
    """The codes in the README's "Exit codes" table."""
    section = README.read_text("utf-8").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}


def test_the_readme_table_is_read() -> None:
    assert {0, 1, 2, 3, 130, 143} <= documented_exit_codes()
    assert len(error_classes()) > 20


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_exits_with_a_documented_code(cls: type[DircleanerError]) -> None:
    assert cls.exit_code in documented_exit_codes() - {0}
    assert cls.__doc__, f"{cls.__name__} says when it is raised"


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_usage_errors_exit_2_and_refusals_3(cls: type[DircleanerError]) -> None:
    if issubclass(cls, UsageError):
        assert cls.exit_code == 2
    if issubclass(cls, GuardRefused):
        assert cls.exit_code == 3
    if cls.exit_code == 2:
        assert issubclass(cls, UsageError), "a usage error is a UsageError, caught as one"


def test_details_are_the_errors_own() -> None:
    given: dict[str, object] = {"candidates": 12}
    error = GuardRefused("too many candidates", details=given)
    given["candidates"] = 0
    assert error.details == {"candidates": 12}
    assert str(error) == "too many candidates"
    assert DircleanerError("no details").details == {}
