"""What every command shares: errors as one line and an exit code (as JSON too with --json),
the global --config checked to be TOML, -v/-q, and summaries as lines or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from dircleaner.cli.context import (
    JSON_REQUESTED,
    AppContext,
    CliError,
    CliRefused,
    CliUsageError,
    emit,
    fail,
    set_verbosity,
    verdict_keys,
)
from dircleaner.errors import UsageError


def context(*, as_json: bool = False) -> click.Context:
    ctx = click.Context(click.Command("cmd"))
    if as_json:
        ctx.meta[JSON_REQUESTED] = True
    return ctx


@pytest.mark.parametrize(
    ("code", "kind"), [(1, CliError), (2, CliUsageError), (3, CliRefused), (4, CliError)]
)
def test_a_failure_is_one_line_with_its_exit_code(
    code: int, kind: type[CliError], capsys: pytest.CaptureFixture[str]
) -> None:
    error = fail(context(), "it went wrong", code, "SomeError")
    assert isinstance(error, kind) and error.exit_code == code
    assert error.format_message() == "it went wrong"
    assert type(fail(context(), "again", code, "SomeError")) is type(error)
    assert capsys.readouterr().out == ""  # no --json: stdout stays clean


def test_with_json_a_failure_is_also_a_verdict_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fail(context(as_json=True), "refused: guard", 3, "GuardRefused", {"limit": 5})
    assert json.loads(capsys.readouterr().out) == {
        "ok": False,
        "error": "refused: guard",
        "error_type": "GuardRefused",
        "exit_code": 3,
        "details": {"limit": 5},
    }


def test_a_dry_run_a_real_run_would_refuse_says_so_in_the_refusal_shape() -> None:
    assert verdict_keys(None) == {}
    assert verdict_keys("too many") == {
        "error": "a real run would be refused: too many",
        "exit_code": 3,
    }


def test_the_config_file_must_be_one_a_cassandra_store_loads(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[cassandra]\nfetch_size = 100\n", encoding="utf-8")
    assert AppContext("db.sqlite", str(good)).config() == good
    assert AppContext("db.sqlite", None).config() is None
    bad = tmp_path / "bad.toml"
    bad.write_text("not = [toml", encoding="utf-8")
    with pytest.raises(UsageError, match="is not valid TOML"):
        AppContext("db.sqlite", str(bad)).config()
    with pytest.raises(UsageError, match=r"missing\.toml does not exist"):
        AppContext("db.sqlite", str(tmp_path / "missing.toml")).config()
    hosts = tmp_path / "hosts.toml"  # the URL names the hosts, never the file
    hosts.write_text('[cassandra]\nhosts = ["h"]\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"unknown config key 'cassandra\.hosts'"):
        AppContext("db.sqlite", str(hosts)).config()


def test_a_plain_path_is_shown_as_an_sqlite_url() -> None:
    assert AppContext("some/meta.db", None).store_url.startswith("sqlite:///")


def test_verbose_and_quiet_contradict() -> None:
    with pytest.raises(UsageError, match="-v and -q contradict"):
        set_verbosity(None, 1, True)


def test_a_summary_is_lines_for_people_or_json_for_machines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit({"deleted": 3}, ["deleted  3", "kept     0"], False)
    assert capsys.readouterr().out == "deleted  3\nkept     0\n"
    emit({"deleted": 3}, ["deleted  3"], True, ok=False)
    assert json.loads(capsys.readouterr().out) == {"ok": False, "deleted": 3}
