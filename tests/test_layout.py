"""Every library module is tested: a test file imports it, or a test file is named after it.

A module counts as imported when any file under tests/ imports it by name (``import
dircleaner.x.y``, ``from dircleaner.x.y import ...``, ``from dircleaner.x import y``, inside a
function too), or imports a class or function it defines from the package that re-exports it
(``from dircleaner.synth import SynthSpec`` imports ``dircleaner.synth.spec``).

A module is reached by a test named after it when a test file is called ``test_<name>.py`` or
``test_<name>_<aspect>.py``, with ``<name>`` the module's own name or its package's name and its
own joined by ``_`` (``cli/options.py``: ``test_options.py``, ``test_cli_options.py``), or, for
a module that defines CLI commands, ``test_cli_<command>`` (``restore`` in
``cli/data_commands.py``: ``test_cli_restore.py``), which the tests of a command are called under
``tests/cli/`` (``tests/cli/test_restore.py``). A package's ``__init__.py`` runs whenever one of
its modules is imported, so it is reached with them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dircleaner"
TESTS = ROOT / "tests"


def library_modules() -> set[str]:
    """Every module of the package, dotted (a package by its own name, not ``__init__``)."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def imported_names(source: str) -> Iterator[str]:
    """The dotted names a file imports, each ``from a import b`` as ``a``, ``a.b`` and, when
    ``b`` is a class or function of the package, the module that defines it."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"
                if node.module.startswith("dircleaner"):
                    yield from defined_in(node.module, alias.name)


def defined_in(module: str, name: str) -> Iterator[str]:
    """The module that defines ``module.name``, when it is a class or function re-exported."""
    obj = getattr(importlib.import_module(module), name, None)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        yield obj.__module__


def sources_under_tests() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def imported_by_tests(modules: set[str]) -> set[str]:
    sources = [path.read_text("utf-8") for path in sources_under_tests()]
    names = {name for source in sources for name in imported_names(source)}
    return {m for m in modules if m in names}


def command_modules() -> dict[str, set[str]]:
    """Module → the CLI commands it defines, as a test file would be named after them."""
    from dircleaner.cli import cli

    out: dict[str, set[str]] = {}
    for name, command in cli.commands.items():
        if command.callback is not None:
            module = command.callback.__module__
            out.setdefault(module, set()).add("cli_" + name.replace("-", "_"))
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                if sub.callback is not None:
                    out.setdefault(sub.callback.__module__, set()).add(f"cli_{name}")
    return out


def names_for(module: str, commands: dict[str, set[str]]) -> set[str]:
    """The names a test file may be called after to reach ``module``."""
    parts = module.split(".")[1:] or ["dircleaner"]
    own = parts[-1].strip("_")
    names = {own, *commands.get(module, set())}
    if len(parts) > 1:
        names.add(f"{parts[-2]}_{own}")
    return names


def named_after(module: str, stems: set[str], commands: dict[str, set[str]]) -> bool:
    return any(
        stem == name or stem.startswith(name + "_")
        for name in names_for(module, commands)
        for stem in stems
    )


def named(paths: list[Path]) -> set[str]:
    """What test files are named after: ``test_<name>.py`` → ``<name>``, and a command's tests
    under ``tests/cli/`` → ``cli_<name>`` too."""
    out = set()
    for path in paths:
        if path.stem.startswith("test_"):
            name = path.stem[len("test_") :]
            out.add(name)
            if path.parent == TESTS / "cli":
                out.add(f"cli_{name}")
    return out


def unreached(modules: set[str]) -> set[str]:
    stems = named(sources_under_tests())
    commands = command_modules()
    reached = imported_by_tests(modules)
    reached |= {m for m in modules - reached if named_after(m, stems, commands)}
    # A package runs with any of its modules.
    reached |= {m for m in modules if any(r.startswith(m + ".") for r in reached)}
    return modules - reached


def test_every_library_module_is_reached_by_a_test() -> None:
    assert sorted(unreached(library_modules())) == []


def test_the_layout_check_sees_imports_names_and_packages() -> None:
    """The check itself: what it counts as reached, and that a module nothing names is not."""
    modules = library_modules()
    assert {"dircleaner", "dircleaner.cli", "dircleaner.pipeline.build"} <= modules
    assert "dircleaner.pipeline.build" in imported_by_tests(modules)
    assert list(imported_names("from dircleaner.synth import SynthSpec")) == [
        "dircleaner.synth",
        "dircleaner.synth.SynthSpec",
        "dircleaner.synth.spec",
    ]
    commands = command_modules()
    assert "cli_restore" in commands["dircleaner.cli.data_commands"]
    assert named_after("dircleaner.cli.options", {"cli_options"}, commands)
    stems = named([TESTS / "cli" / "test_restore_night.py", TESTS / "test_restore.py"])
    assert stems == {"restore_night", "cli_restore_night", "restore"}
    assert named_after("dircleaner.cli.data_commands", stems, commands)
    assert named_after("dircleaner.gcpause", {"gcpause"}, commands)
    assert not named_after("dircleaner.gcpause", {"gcpauses", "paused"}, commands)
    ghost = "dircleaner.pipeline.no_such_module"
    assert unreached({ghost, "dircleaner.pipeline.build"}) == {ghost}
