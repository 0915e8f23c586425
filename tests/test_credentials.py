"""Credentials come from config or environment and never reach logs or output."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dircleaner.cli import cli
from dircleaner.store.cassandra.config import load_cassandra_config, parse_cassandra_url

SECRET = "s3cr3t-Pa55-do-not-log"
ENV_SECRET = "env-0nly-s3cr3t"


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "cassandra.toml"
    path.write_text(f'[cassandra.auth]\nusername = "dircleaner"\npassword = "{SECRET}"\n')
    return path


def test_the_config_never_shows_the_password(tmp_path: Path) -> None:
    cfg = load_cassandra_config(
        parse_cassandra_url("cassandra://127.0.0.1:9042/ks"), config_file(tmp_path), environ={}
    )
    assert cfg.auth.password == SECRET
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    cfg = load_cassandra_config(
        parse_cassandra_url("cassandra://127.0.0.1:9042/ks"),
        config_file(tmp_path),
        environ={"DIRCLEANER_CASSANDRA_PASSWORD": ENV_SECRET},
    )
    assert cfg.auth.password == ENV_SECRET


def test_there_is_no_command_line_option_for_a_password() -> None:
    result = CliRunner().invoke(cli, ["--password", "x", "run"])
    assert result.exit_code == 2
    for command in cli.commands.values():
        assert not any("password" in p.name for p in command.params if p.name)


@pytest.mark.cassandra
def test_a_whole_job_at_debug_level_logs_no_credentials(tmp_path: Path, cassandra_url: str) -> None:
    url = cassandra_url.rsplit("/", 1)[0] + "/dircleaner_creds"
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"c/{i}/obj\n" for i in range(30)))
    runner = CliRunner()
    base = ["--log-level", "debug", "--store", url, "--config", str(config_file(tmp_path))]
    env = {
        "DIRCLEANER_CASSANDRA_USERNAME": "dircleaner",
        "DIRCLEANER_CASSANDRA_PASSWORD": ENV_SECRET,
    }
    outputs = []
    for args in (
        ["init-schema"],
        ["import-keys", str(keys)],
        ["run", "--dry-run", "--min-age", "0", "--json"],
    ):
        result = runner.invoke(cli, [*base, *args], env=env)
        assert result.exit_code == 0, result.output
        outputs.append(result.output + (result.stderr or ""))
    # An unreachable node's error message must not echo credentials either.
    bad = ["--store", "cassandra://127.0.0.1:1/ks", "--config", str(config_file(tmp_path))]
    result = runner.invoke(cli, [*bad, "list-dirs"], env=env)
    assert result.exit_code == 1
    outputs.append(result.output + (result.stderr or ""))
    everything = "\n".join(outputs)
    assert " DEBUG cassandra" in everything, "debug logging produced nothing to check"
    assert " INFO dircleaner: sweep: started" in everything
    for secret in (SECRET, ENV_SECRET):
        assert secret not in everything
