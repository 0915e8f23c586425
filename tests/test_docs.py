"""README.md and docs/ say only what the CLI does: every command and option they show exists,
every command is in the README's table, every test and file they name exists."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from dircleaner.cli import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
#: shell words after which a command's own arguments end
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "<", "&"}


def snippets(text: str) -> Iterator[str]:
    """Each line of each fenced block (continuations joined), then each inline code span."""
    for block in FENCE.findall(text):
        yield from block.replace("\\\n", " ").splitlines()
    for span in SPAN.findall(FENCE.sub("", text)):
        yield span.replace("\\|", "|")


def words(snippet: str) -> list[str]:
    try:
        return shlex.split(snippet, comments=True)
    except ValueError:  # an unbalanced quote in prose: split on blanks
        return snippet.split()


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


GLOBAL_OPTIONS = _options(cli) | {"--help", "-h"}


def problems(snippet: str) -> list[str]:
    """What a snippet shows that the CLI does not have: an unknown command, or an option the
    command does not take. A snippet is checked from the word ``dircleaner`` on, or from its
    first word when that is a command name (``run --dry-run`` in prose)."""
    tokens = words(snippet)
    starts = [i for i, t in enumerate(tokens) if t == "dircleaner" or t.endswith("/dircleaner")]
    if starts:
        rest = tokens[starts[0] + 1 :]
    elif tokens and tokens[0] in cli.commands:
        rest = tokens
    else:
        return []
    group: click.Command = cli
    while rest and rest[0].startswith("-") and rest[0] != "-":
        option = rest.pop(0)
        name = option.split("=", 1)[0]
        if name not in GLOBAL_OPTIONS:
            return [f"{snippet!r}: no global option {name}"]
        if "=" not in option and name not in ("--help", "-h", "--version") and rest:
            rest.pop(0)
    if not rest or not re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        return []  # `dircleaner` alone, or a placeholder: `dircleaner [--store URL] COMMAND`
    path = []
    command: click.Command = group
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    if isinstance(command, click.Group):
        if command is cli or (rest and re.fullmatch(r"[a-z][a-z-]*", rest[0])):
            return [f"{snippet!r}: no command {' '.join(path + rest[:1])}"]
        return []  # the group itself named in prose: `filters`, `filters list|show`
    known = _options(command) | GLOBAL_OPTIONS
    out = []
    for token in rest:
        if token in SEPARATORS or token.endswith(";"):
            break
        name = token.split("=", 1)[0]
        if name.startswith("--") and name not in known:
            out.append(f"{snippet!r}: {' '.join(path)} has no option {name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_option_shown_exists(page: Path) -> None:
    found = [p for s in snippets(page.read_text(encoding="utf-8")) for p in problems(s)]
    assert found == []


def test_the_check_catches_an_unknown_option_and_an_unknown_command() -> None:
    assert problems("dircleaner run --no-such-option") == [
        "'dircleaner run --no-such-option': run has no option --no-such-option"
    ]
    assert problems("clean --prefix a/ --dry-run --fpr 0.1") == [
        "'clean --prefix a/ --dry-run --fpr 0.1': clean has no option --fpr"
    ]
    assert problems("dircleaner --store sqlite:///m.db purge") != []
    assert problems("dircleaner filters show G --json") != []
    assert problems("dircleaner filters purge") != []
    assert problems("filters list|show") == []
    assert problems("/opt/x/bin/dircleaner run --workers 2 | tee --bogus") == []
    assert problems("python bench/e2e.py --dirs 10") == []


def readme_command_table() -> set[str]:
    """The first cell of every row of the README's "Commands" table, as command words."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n\n| command |", 1)[1].split("\n\n", 1)[0]
    out = set()
    for row in table.splitlines()[1:]:
        cell = row.split("|")[1]
        match = SPAN.search(cell)
        if match and not set("-") >= set(cell.strip()):
            tokens = match.group(1).split()
            out.add(tokens[0])
            if tokens[0] in cli.commands and isinstance(cli.commands[tokens[0]], click.Group):
                out.add(" ".join(tokens[:2]))
    return out


def every_command() -> set[str]:
    out = set()
    for name, command in cli.commands.items():
        out.add(name)
        if isinstance(command, click.Group):
            out.update(f"{name} {sub}" for sub in command.commands)
    return out


def test_every_command_is_in_the_readme_table() -> None:
    table = readme_command_table()
    assert every_command() - table == set()
    assert table - every_command() == set()


TEST_REF = re.compile(r"\b(test_[a-z0-9_]+\.py)(?:::(test_[a-z0-9_]+))?")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_test_the_docs_name_exists(page: Path) -> None:
    missing = []
    for module, function in TEST_REF.findall(page.read_text(encoding="utf-8")):
        files = list((ROOT / "tests").rglob(module))
        if not files:
            missing.append(module)
        elif function and not any(
            re.search(rf"def {function}\(", f.read_text(encoding="utf-8")) for f in files
        ):
            missing.append(f"{module}::{function}")
    assert missing == []


LINK = re.compile(r"\]\(([^)\s#]+)(#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [
        target
        for target, _anchor in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == []


def test_the_readme_is_for_users() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    for heading in ("## Install", "## Commands", "## Exit codes", "## The safety contract"):
        assert heading in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_history_in_the_docs(page: Path) -> None:
    """Docs say what is; git keeps how it came to be."""
    text = page.read_text(encoding="utf-8")
    assert re.findall(r"(?i)\bissue \d+|\bsessions?\b(?!\.py)", text) == []
    assert re.findall(r"`[0-9a-f]{7,40}`", text) == []


def source_tree_block() -> str:
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("## The source tree", 1)[1]
    return section.split("```", 2)[1].split("\ntests/", 1)[0]  # the package's part


def layout_problems(block: str, modules: set[str]) -> list[str]:
    """What the source tree's sketch and the package disagree on, by module file name."""
    named = set(re.findall(r"\b([a-z_0-9]+\.py)\b", block))
    missing = sorted(m for m in modules if m not in named)
    gone = sorted(n for n in named if n not in modules)
    return [f"not in the sketch: {m}" for m in missing] + [f"no such module: {n}" for n in gone]


def test_the_source_tree_sketch_names_every_module() -> None:
    modules = {p.name for p in (ROOT / "dircleaner").rglob("*.py") if p.name != "__init__.py"}
    assert layout_problems(source_tree_block(), modules) == []


def test_the_layout_check_catches_a_missing_and_a_stale_module() -> None:
    assert layout_problems("run.py · old.py", {"run.py", "new.py"}) == [
        "not in the sketch: new.py",
        "no such module: old.py",
    ]
