"""The conventions every command follows: help with an example, a test file named after it, -n,
-v/-q, --json, --metrics-file, and a --config that must be TOML."""

from __future__ import annotations

import inspect
import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dircleaner.cli import cli
from dircleaner.cli.progress_display import TerminalProgress, quiet, set_quiet
from tests.helpers import EAGER, invoke, said, samples_of

#: commands that print no summary of their own, and what they print instead
WITHOUT_JSON = {
    "list-dirs": "one directory per line",
    "filters show": "JSON already",
    "filters new-id": "one generation id",
}
#: commands whose --json is not added here
JSON_ELSEWHERE: set[str] = set()


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command and group under ``group``, by the name it is invoked with."""
    for name, command in sorted(group.commands.items()):
        yield prefix + name, command
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix}{name} ")


def test_every_command_follows_the_conventions() -> None:
    assert "dircleaner --store sqlite:///meta.db run" in (cli.help or "")
    seen = set()
    for name, command in commands(cli):
        seen.add(name)
        text = command.help or ""
        assert "Example:" in text, f"{name}: no example in its help"
        example = text.split("Example:", 1)[1]
        assert f"dircleaner {name.split()[0]}" in example or "dircleaner --store" in example, name
        if isinstance(command, click.Group):
            continue
        opts = {opt for param in command.params for opt in param.opts}
        if "--dry-run" in opts:
            assert "-n" in opts, f"{name}: --dry-run without -n"
        if name not in WITHOUT_JSON and name not in JSON_ELSEWHERE:
            assert "--json" in opts, f"{name}: prints a summary but has no --json"
        assert {"-v", "-q"} <= opts, name
    assert {"clean", "run", "restore", "import-keys", "delete-keys", "filters rm"} <= seen


def test_every_command_names_its_options_in_its_signature() -> None:
    """A command's function lists, typed, each option it is given: no ``**params`` hides which
    options a command has from whoever reads it (or from mypy)."""
    for name, command in commands(cli):
        if command.callback is None:
            continue
        signature = inspect.signature(command.callback)
        kinds = {param.kind for param in signature.parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}: takes **keywords"
        for option in command.params:
            if option.expose_value:
                assert option.name in signature.parameters, f"{name}: no {option.name} argument"
                typed = signature.parameters[option.name].annotation
                assert typed is not inspect.Parameter.empty, f"{name}: {option.name} untyped"


def test_every_command_has_a_test_file_named_after_it() -> None:
    """tests/cli/test_<command>.py (a group's subcommands share their group's): a newcomer
    finds a command's tests by its name."""
    tests = Path(__file__).parent / "cli"
    missing = [
        name
        for name in sorted(cli.commands)
        if not (tests / f"test_{name.replace('-', '_')}.py").is_file()
    ]
    assert missing == []


# -- -n -------------------------------------------------------------------------------------------


@pytest.fixture()
def url(tmp_path: Path) -> str:
    """A store of 10 directories, 3 of them emptied (over the default --max-delete-fraction)."""
    store = f"sqlite:///{tmp_path}/src/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


def dirs(url: str) -> list[str]:
    result = invoke(url, "list-dirs", "--bucket", "default", "--sort")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ("clean", "-n", *EAGER),
        ("run", "-n", *EAGER),
        ("clean", "--prefix", "d/", "-n", "--min-age", "0"),
    ],
)
def test_n_is_dry_run(url: str, args: tuple[str, ...]) -> None:
    assert invoke(url, "build").exit_code == 0
    before = dirs(url)
    result = invoke(url, *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dry_run"] if args[0] == "clean" else True
    assert dirs(url) == before


# -- -v / -q --------------------------------------------------------------------------------------


def test_v_logs_more_and_vv_most(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    plain = invoke(url, "import-keys", "-", input="a/b\n")
    assert plain.exit_code == 0 and " INFO " not in plain.stderr
    louder = invoke(url, "-v", "import-keys", "-", input="a/c\n")
    assert louder.exit_code == 0
    assert re.search(r" INFO dircleaner: put: started$", louder.stderr, re.M), louder.stderr
    after = invoke(url, "import-keys", "-", "-v", input="a/d\n")
    assert " INFO dircleaner: put: started" in after.stderr
    assert invoke(url, "-vv", "list-dirs").exit_code == 0
    assert logging.getLogger("dircleaner").level == logging.DEBUG
    assert invoke(url, "--log-level", "error", "-v", "list-dirs").exit_code == 0
    assert logging.getLogger("dircleaner").level == logging.WARNING


def test_q_keeps_the_summary_and_errors_and_drops_notes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    crlf = b"a/b\r\na/c\r\n"
    noted = invoke(url, "import-keys", "-", input=crlf)
    assert said(noted).startswith("CRLF line endings")
    for args in (("-q", "import-keys", "-"), ("import-keys", "-", "-q")):
        hushed = invoke(url, *args, input=crlf)
        assert (hushed.exit_code, hushed.stderr) == (0, ""), hushed.output
        assert hushed.stdout == "put 2 keys in bucket 'default'; rejected 0 lines\n"
    assert logging.getLogger("dircleaner").level == logging.ERROR
    failed = invoke(f"sqlite:///{tmp_path}/absent.db", "-q", "list-dirs")
    assert failed.exit_code == 1 and failed.stderr.startswith("Error: no metastore at ")
    both = invoke(url, "-v", "-q", "list-dirs")
    assert (both.exit_code, both.output) == (
        2,
        "Error: -v and -q contradict each other: give one of them\n",
    )
    assert invoke(url, "list-dirs").exit_code == 0
    assert not quiet()  # each command starts from the defaults


def test_q_keeps_a_terminal_free_of_progress() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for hushed in (False, True):
        set_quiet(hushed)
        try:
            terminal = Terminal()
            progress = TerminalProgress(terminal)
            progress("sweep", 10, 100)
            progress.close()
        finally:
            set_quiet(False)
        assert ("sweep: 10/100" in terminal.getvalue()) is not hushed


# -- --json ---------------------------------------------------------------------------------------


def test_json_of_import_keys_and_delete_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    put = invoke(url, "import-keys", "-", "--json", input="a/b\na/c\n")
    assert put.exit_code == 0, put.output
    assert json.loads(put.stdout) == {
        "ok": True,
        "bucket": "default",
        "keys": 2,
        "put": 2,
        "rejected_lines": 0,
        "crlf_lines_stripped": 0,
    }
    deleted = invoke(url, "delete-keys", "-", "--json", input="a/b\nnope\n\n")
    assert deleted.exit_code == 1
    assert said(deleted) == "line 3: empty key; skipped\n"
    assert json.loads(deleted.stdout) == {
        "ok": False,
        "bucket": "default",
        "keys": 2,
        "deleted": 1,
        "did_not_exist": 1,
        "rejected_lines": 1,
        "crlf_lines_stripped": 0,
        "error": "rejected 1 line (see stderr)",
        "exit_code": 1,
    }


def test_json_of_gen_and_filters_rm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    made = invoke(url, "gen", "--dirs", "20", "--json")
    assert made.exit_code == 0, made.output
    assert set(json.loads(made.stdout)) == {"ok", "dirs", "empty_dirs", "objects", "seconds"}
    generation = json.loads(invoke(url, "build", "--json").stdout)["generation"]
    removed = invoke(url, "filters", "rm", generation, "--json")
    assert json.loads(removed.stdout) == {"ok": True, "removed": generation}


# -- --metrics-file -------------------------------------------------------------------------------


def metrics(path: Path) -> dict[str, float]:
    return samples_of(path.read_text())


def test_build_and_sweep_write_metrics(url: str, tmp_path: Path) -> None:
    prom = tmp_path / "textfile" / "dircleaner.prom"
    failed = invoke(url, "sweep", "--metrics-file", str(prom))
    assert failed.exit_code == 1
    assert metrics(prom)["dircleaner_last_run_success"] == 0
    built = invoke(url, "build", "--metrics-file", str(prom))
    assert built.exit_code == 0, built.output
    values = metrics(prom)
    assert values["dircleaner_last_run_success"] == 1
    assert values["dircleaner_object_partitions_scanned"] == 7
    assert values["dircleaner_filter_bytes"] > 0
    assert 'dircleaner_phase_seconds{phase="build"}' in values
    assert "dircleaner_candidates" not in values
    swept = invoke(url, "sweep", "--metrics-file", str(prom))
    assert swept.exit_code == 0, swept.output
    values = metrics(prom)
    assert values["dircleaner_last_run_success"] == 1
    assert (values["dircleaner_directories_scanned"], values["dircleaner_candidates"]) == (11, 3)
    assert 'dircleaner_phase_seconds{phase="sweep"}' in values
    assert "dircleaner_filter_bytes" not in values


# -- --config -------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_malformed_config_is_refused_with_a_sqlite_store(
    url: str, tmp_path: Path, where: str
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[cassandra\nconsistency = 'QUORUM'\n")
    args = ["--config", str(bad), "list-dirs"]
    if where == "after":
        args = ["list-dirs", "--config", str(bad)]
    result = invoke(url, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: config file {bad} is not valid TOML: ")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    good = tmp_path / "good.toml"
    good.write_text("[cassandra.consistency]\nbuild = 'QUORUM'\n")
    assert invoke(url, "--config", str(good), "list-dirs").exit_code == 0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[cassandra]\nfetchsize = 100\n", "unknown config key 'cassandra.fetchsize' in {path}"),
        ("[cassandra.tabels]\nfolders = 'f'\n", "unknown config key 'cassandra.tabels' in {path}"),
        ("[cassandra]\nconsistency = 'QUORUM'\n", "config key cassandra.consistency in {path}"
         " must be a table"),
        ("[cassandra]\nfetch_size = 0\n", "fetch_size must be at least 1"),
        ("[cassandra]\nscan_rate = nan\n", "config key cassandra.scan_rate must be a finite"
         " number, not nan"),
    ],
)  # fmt: skip
@pytest.mark.parametrize(
    "args",
    [
        ("--config", "PATH", "list-dirs"),
        ("list-dirs", "--config", "PATH"),
        ("run", "-n", "--config", "PATH"),
        ("import-keys", "-", "--config", "PATH"),
    ],
)
def test_a_config_a_cassandra_store_would_refuse_is_refused_with_a_sqlite_store(
    url: str, tmp_path: Path, text: str, error: str, args: tuple[str, ...]
) -> None:
    """README: unknown keys are refused. A SQLite store reads nothing from the file, but a
    typo in it must not pass unnoticed until the day the file is used."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    before = dirs(url)
    result = invoke(url, *[str(path) if a == "PATH" else a for a in args], input="z/1\n")
    assert result.exit_code == 2, result.output
    assert result.stderr == f"Error: {error.format(path=path)}\n"
    assert result.stdout == ""
    assert dirs(url) == before


def test_a_config_in_the_environment_is_checked_too(url: str, tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[cassandra]\nfetchsize = 100\n")
    result = CliRunner(env={"DIRCLEANER_CONFIG": str(path)}).invoke(
        cli, ["--store", url, "list-dirs"]
    )
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: unknown config key 'cassandra.fetchsize' in {path}\n",
    )
