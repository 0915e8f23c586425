"""Every library module is tested: a test file imports it, or a test file is named after it;
and most modules have a test file named after them, so a newcomer finds a module's tests by its
name.

The rule for names. Test files sit flat in ``tests/`` (a command's in ``tests/cli/``); a module
of a subpackage is not mirrored in a directory but named with its package:
``store/sqlite/scans.py`` ↔ ``tests/test_sqlite_scans.py`` (not
``tests/store/sqlite/test_scans.py``). A test file called ``test_<name>.py`` or
``test_<name>_<aspect>.py`` is named after a module when ``<name>`` is

- the module's package's name and its own joined by ``_`` (``cli/options.py``:
  ``test_cli_options.py``; ``store/cassandra/mapping.py``: ``test_cassandra_mapping.py``), or
- the module's own name alone, when no other module or package has it (``audit.py``,
  ``filter/bloom.py``: ``test_bloom.py``); a name several have (``store`` is the package's,
  SQLite's and Cassandra's; ``sweep``, ``changed``, ``schema``) names none of them alone, so
  ``store/sqlite/store.py`` is ``test_sqlite_store.py``, and ``test_store_base.py`` is
  ``store/base.py``'s; or
- for a module that defines CLI commands, ``cli_<command>``: a command's tests are
  ``tests/cli/test_<command>.py`` (``restore`` in ``cli/data_commands.py``:
  ``tests/cli/test_restore.py``; a file there names a command, not a module).

A file is named after the module whose name fits it longest: ``test_progress_display.py`` is
``cli/progress_display.py``'s, not ``progress.py``'s. Of the modules that count (every ``.py``
under ``dircleaner/`` but packages' ``__init__.py`` and ``__main__.py``), at least
``NAMED_SHARE`` have a test file named after them.

A module counts as imported when any file under tests/ imports it by name (``import
dircleaner.x.y``, ``from dircleaner.x.y import ...``, ``from dircleaner.x import y``, inside a
function too), or imports a class or function it defines from the package that re-exports it
(``from dircleaner.synth import SynthSpec`` imports ``dircleaner.synth.spec``). A package's
``__init__.py`` runs whenever one of its modules is imported, so it is reached with them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dircleaner"
TESTS = ROOT / "tests"
NAMED_SHARE = 0.8


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


def own_name(module: str) -> str:
    return (module.split(".")[1:] or ["dircleaner"])[-1].strip("_")


def shared_names(modules: set[str]) -> set[str]:
    """The own names more than one module or package has (``store``, ``schema``, ``sweep``)."""
    owners = Counter(own_name(m) for m in modules)
    return {name for name, count in owners.items() if count > 1}


def names_for(module: str, commands: dict[str, set[str]], shared: set[str]) -> set[str]:
    """The names a test file may be called after to reach ``module``."""
    parts = module.split(".")[1:] or ["dircleaner"]
    own = own_name(module)
    names = set(commands.get(module, set()))
    if own not in shared:
        names.add(own)
    if len(parts) > 1:
        names.add(f"{parts[-2]}_{own}")
    return names


def fits(stem: str, name: str) -> bool:
    return stem == name or stem.startswith(name + "_")


def named_after(
    module: str, stems: set[str], commands: dict[str, set[str]], shared: set[str]
) -> bool:
    """Whether a file of ``stems`` is named after ``module``: a name of the module fits it, and
    no longer name of another module does (``progress_display`` names ``progress_display.py``,
    not ``progress.py``)."""
    others = {
        name
        for other in library_modules() - {module}
        for name in names_for(other, commands, shared)
    }
    return any(
        fits(stem, name) and not any(len(o) > len(name) and fits(stem, o) for o in others)
        for name in names_for(module, commands, shared)
        for stem in stems
    )


def named(paths: list[Path]) -> set[str]:
    """What test files are named after: ``test_<name>.py`` → ``<name>``, and a command's tests
    under ``tests/cli/`` → ``cli_<name>``."""
    out = set()
    for path in paths:
        if path.stem.startswith("test_"):
            name = path.stem[len("test_") :]
            out.add(f"cli_{name}" if path.parent == TESTS / "cli" else name)
    return out


def without_a_named_test(modules: set[str]) -> set[str]:
    """The modules no test file is named after."""
    stems = named(sources_under_tests())
    commands = command_modules()
    shared = shared_names(library_modules())
    return {m for m in modules if not named_after(m, stems, commands, shared)}


def modules_to_name() -> set[str]:
    """The modules a test file should be named after: all but packages' faces and ``__main__``."""
    packages = {m for m in library_modules() if (ROOT / m.replace(".", "/")).is_dir()}
    return {m for m in library_modules() - packages if own_name(m) != "main"}


def unreached(modules: set[str]) -> set[str]:
    reached = imported_by_tests(modules)
    reached |= modules - reached - without_a_named_test(modules - reached)
    # A package runs with any of its modules.
    reached |= {m for m in modules if any(r.startswith(m + ".") for r in reached)}
    return modules - reached


def test_every_library_module_is_reached_by_a_test() -> None:
    assert sorted(unreached(library_modules())) == []


def test_most_modules_have_a_test_file_of_their_name() -> None:
    modules = modules_to_name()
    missing = sorted(without_a_named_test(modules))
    named_count = len(modules) - len(missing)
    assert named_count >= NAMED_SHARE * len(modules), (
        f"{named_count} of {len(modules)} modules have a test file named after them, fewer than "
        f"{NAMED_SHARE:.0%}; none is named after " + ", ".join(missing)
    )


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
    shared = shared_names(modules)
    assert "cli_restore" in commands["dircleaner.cli.data_commands"]
    assert named_after("dircleaner.cli.options", {"cli_options"}, commands, shared)
    stems = named([TESTS / "cli" / "test_restore_night.py", TESTS / "test_restore.py"])
    assert stems == {"cli_restore_night", "restore"}
    assert named_after("dircleaner.cli.data_commands", stems, commands, shared)
    assert named_after("dircleaner.gcpause", {"gcpause"}, commands, shared)
    assert not named_after("dircleaner.gcpause", {"gcpauses", "paused"}, commands, shared)
    # A file is named after the module whose name fits it longest.
    display = "dircleaner.cli.progress_display"
    assert named_after(display, {"progress_display_lines"}, commands, shared)
    assert not named_after("dircleaner.progress", {"progress_display_lines"}, commands, shared)
    assert named_after("dircleaner.progress", {"progress_counter"}, commands, shared)
    # A name two modules share names neither alone; their package's name joined to it does.
    assert {"store", "schema"} <= shared
    sqlite_store = "dircleaner.store.sqlite.store"
    assert not named_after(sqlite_store, {"store_base", "store_sqlite"}, commands, shared)
    assert named_after(sqlite_store, {"sqlite_store"}, commands, shared)
    assert not named_after("dircleaner.store.cassandra.store", {"sqlite_store"}, commands, shared)
    ghost = "dircleaner.pipeline.no_such_module"
    assert unreached({ghost, "dircleaner.pipeline.build"}) == {ghost}
    assert without_a_named_test({ghost, "dircleaner.gcpause"}) == {ghost}
    to_name = modules_to_name()
    assert "dircleaner.store.sqlite.store" in to_name
    assert not {"dircleaner", "dircleaner.store", "dircleaner.__main__"} & to_name
