"""deploy/: the files operators install, checked by the tools that will read them.

promtool checks and unit-tests the alert rules, a real node_exporter serves a real run's
metrics file, systemd-analyze verifies the units, and every metric the alerts and the
dashboard query is one a run writes. The tools come from Debian's packages (`make tools`);
without them these tests skip, or fail in CI, as the Cassandra fixture does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers import invoke, samples_of, write_lines
from tests.test_cli_ending import (  # noqa: F401 (a fixture)
    SERVICE_UID,
    as_service_user,
    service_user_home,
    shared_dir,
)

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "dircleaner.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "dircleaner.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "dircleaner.json"
TMPFILES = DEPLOY / "tmpfiles.d" / "dircleaner.conf"
CRON = DEPLOY / "cron.example"
UNITS = (
    "dircleaner.service",
    "dircleaner.timer",
    "dircleaner-churn.service",
    "dircleaner-churn.timer",
    "dask-scheduler.service",
    "dask-worker.service",
)
METRIC = re.compile(r"\bdircleaner_[a-z_]+")


def tools_required() -> bool:
    """CI (and a run that requires the Cassandra node) must not pass by skipping."""
    return os.environ.get("DIRCLEANER_REQUIRE_CASSANDRA") == "1" or bool(os.environ.get("CI"))


def tool(name: str) -> str:
    """The path of a command-line tool, or skip (fail in CI) naming how to install it."""
    path = shutil.which(name)
    if path is None:
        why = f"{name} is not installed; run `make tools` (Debian packages, apt-get)"
        if tools_required():
            pytest.fail(why)
        pytest.skip(why)
    return path


# -- a real run's metrics file --------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_metrics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The textfile directory holding ``dircleaner.prom`` of a real nightly run on SQLite, and
    beside it ``dircleaner-prefix.prom`` of a prefix clean by hand, as docs/operations.md says."""
    base = tmp_path_factory.mktemp("run")
    url = f"sqlite:///{base}/meta.db"
    made = invoke(url, "gen", "--dirs", "2000", "--seed", "3", "--truth", str(base / "truth"))
    assert made.exit_code == 0, made.output
    textfile = base / "textfile"
    result = invoke(
        url,
        "run",
        "--rate",
        "0",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "0.5",
        "--audit-log",
        str(base / "audit.jsonl"),
        "--metrics-file",
        str(textfile / "dircleaner.prom"),
    )
    assert result.exit_code == 0, result.output
    gone = [f"logs/2025/{i}/x" for i in range(5)]
    assert invoke(url, "import-keys", str(write_lines(base / "old", gone))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(base / "old", gone))).exit_code == 0
    prefix = ["clean", "--prefix", "logs/2025/", "--min-age", "0", "--rate", "0"]
    prefix += ["--audit-log", str(base / "audit.jsonl")]
    result = invoke(url, *prefix, "--metrics-file", str(textfile / "dircleaner-prefix.prom"))
    assert result.exit_code == 0, result.output
    churned = [f"churn/{i}/x" for i in range(3)]
    assert invoke(url, "import-keys", str(write_lines(base / "churn", churned))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(base / "churn", churned))).exit_code == 0
    churn = ["clean", "--changed", "--settle", "0s", "--min-age", "0s", "--rate", "0"]
    churn += ["--audit-log", str(base / "audit.jsonl")]
    result = invoke(url, *churn, "--metrics-file", str(textfile / "dircleaner-churn.prom"))
    assert result.exit_code == 0, result.output
    return textfile


LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[str, float]:
    """Prometheus text exposition: ``name{labels} value`` per sample line, the labels in
    name order (as node_exporter serves them)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            pairs = ",".join(f'{k}="{v}"' for k, v in sorted(LABEL.findall(labels)))
            out[f"{name}{{{pairs}}}" if pairs else name] = float(value)
    return out


def metric_names(text: str) -> set[str]:
    return {name.split("{", 1)[0] for name in samples(text)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def node_exporter(run_metrics: Path) -> Iterator[str]:
    """A real node_exporter on loopback, with only its textfile collector; stopped after."""
    binary = tool("prometheus-node-exporter")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={run_metrics}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    _, err = process.communicate(timeout=5)
                    pytest.fail(f"node_exporter did not serve {url}: {err.decode()[-500:]}")
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_node_exporter_serves_every_file_each_with_series_of_its_own(
    run_metrics: Path, node_exporter: str
) -> None:
    """The full night's file, a churn night's and a prefix clean's beside them: every sample of
    each is served (node_exporter serves only one of two samples with the same name and
    labels, and says so only in its log)."""
    nightly = (run_metrics / "dircleaner.prom").read_text()
    churn = (run_metrics / "dircleaner-churn.prom").read_text()
    prefix = (run_metrics / "dircleaner-prefix.prom").read_text()
    with urllib.request.urlopen(node_exporter, timeout=10) as response:
        scraped = samples(response.read().decode())
    assert scraped["node_textfile_scrape_error"] == 0
    ours = {name: value for name, value in scraped.items() if name.startswith("dircleaner_")}
    assert ours == samples(nightly) | samples(churn) | samples(prefix)
    assert len(ours) == len(samples(nightly)) + len(samples(churn)) + len(samples(prefix))
    for text, command in ((nightly, "run"), (churn, "clean --changed"), (prefix, "clean --prefix")):
        values = samples_of(text)
        assert (values["dircleaner_last_run_success"], values["dircleaner_last_run_refused"]) == (
            1,
            0,
        )
        lines = [line for line in text.splitlines() if not line.startswith("#")]
        assert all(line.startswith("dircleaner_") for line in lines)
        assert all(f'{{command="{command}",store="sqlite:///' in line for line in lines)
    assert samples_of(nightly)["dircleaner_directories_scanned"] > 2000
    assert samples_of(prefix)["dircleaner_removed_directories"] == 6  # logs/2025/ and its 5
    assert samples_of(churn)["dircleaner_removed_directories"] == 4  # churn/ and its 3
    # The 3 parents of churn/'s deletes, and the 5 of logs/2025/'s, which the prefix clean
    # had already removed (the night reads them, finds nothing to delete).
    assert samples_of(churn)["dircleaner_journal_entries_read"] == 8
    # Which kind of night each was, as a label of a series of its own.
    assert 'dircleaner_night{command="run",store="sqlite:///' in nightly
    assert 'kind="full"} 1' in nightly and 'kind="churn"} 1' in churn


# -- the alert rules ------------------------------------------------------------------------------


def test_the_alert_rules_pass_promtool_check() -> None:
    result = subprocess.run(
        [tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_each_alert_is_unit_tested_by_promtool() -> None:
    result = subprocess.run(
        [tool("promtool"), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == set(alert_names())


def alert_names() -> list[str]:
    return [rule["alert"] for group in rules()["groups"] for rule in group["rules"]]


def rules() -> dict[str, list[dict[str, list[dict[str, str]]]]]:
    loaded: dict[str, list[dict[str, list[dict[str, str]]]]] = yaml.safe_load(RULES.read_text())
    return loaded


def queried_metrics() -> dict[str, set[str]]:
    """Every ``dircleaner_*`` metric an alert or a dashboard panel queries, by where."""
    out: dict[str, set[str]] = {}
    for group in rules()["groups"]:
        for rule in group["rules"]:
            out[f"alert {rule['alert']}"] = set(METRIC.findall(rule["expr"]))
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        exprs = " ".join(target["expr"] for target in panel["targets"])
        out[f"panel {panel['title']}"] = set(METRIC.findall(exprs))
    for variable in dashboard["templating"]["list"]:
        out[f"variable {variable['name']}"] = set(METRIC.findall(json.dumps(variable)))
    return out


def test_alerts_and_dashboard_query_only_metrics_a_run_writes(run_metrics: Path) -> None:
    nights = ("dircleaner.prom", "dircleaner-churn.prom")
    written = set().union(*(metric_names((run_metrics / name).read_text()) for name in nights))
    queried = queried_metrics()
    unknown = {where: names - written for where, names in queried.items() if names - written}
    assert unknown == {}
    every = set().union(*queried.values())
    assert {
        "dircleaner_last_run_success",
        "dircleaner_last_run_timestamp_seconds",
        "dircleaner_last_run_refused",
        "dircleaner_deferred_by_budget",
    } <= every


def test_only_a_failure_alerts_for_every_command_and_every_panel_picks_its_commands() -> None:
    """A prefix clean's file lives beside the nights' for weeks: the nights' alerts (stale,
    absent, refused, backlog) select the full night, command="run", and the churn night,
    command="clean --changed", by name; a failure alerts whatever ran."""
    nights = {'{command="run"}', '{command="clean --changed"}', '{command=~"run|clean --changed"}'}
    for group in rules()["groups"]:
        for rule in group["rules"]:
            selectors = set(re.findall(r"\bdircleaner_[a-z_]+(\{[^}]*\})?", rule["expr"]))
            if rule["alert"] == "DircleanerRunFailed":
                assert selectors == {""}, rule["alert"]
            else:
                assert selectors and selectors <= nights, rule["alert"]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for selector in re.findall(r"\bdircleaner_[a-z_]+(\{[^}]*\})", target["expr"]):
                assert 'command=~"$command"' in selector, panel["title"]


def test_the_dashboard_is_grafana_json_with_a_query_in_every_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "dircleaner"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(METRIC.search(target["expr"]) for target in panel["targets"]), panel["title"]


# -- the service user's access to node_exporter's directory, and cron -----------------------------


def test_the_tmpfiles_rule_lets_the_service_user_write_debians_textfile_directory(
    shared_dir: Path,  # noqa: F811
) -> None:
    """In a scratch root holding node_exporter's directory as Debian ships it (root:root
    0755) and a user meta: the run as meta is refused at once; after the rule, it writes."""
    tmpfiles = tool("systemd-tmpfiles")
    (shared_dir / "etc").mkdir()
    (shared_dir / "etc" / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nmeta:x:{SERVICE_UID}:{SERVICE_UID}::/home/meta:/bin/sh\n"
    )
    (shared_dir / "etc" / "group").write_text(f"root:x:0:\nmeta:x:{SERVICE_UID}:\n")
    textfile = shared_dir / "var" / "lib" / "prometheus" / "node-exporter"
    textfile.mkdir(parents=True)
    textfile.chmod(0o755)
    store = service_user_home(shared_dir) / "meta.db"
    made = as_service_user(store, "gen", "--dirs", "300", "--seed", "2")
    assert made.returncode == 0, made.stderr
    nightly = ["run", "--max-delete-fraction", "1", "--min-age", "0", "--rate", "0"]
    nightly += ["--metrics-file", str(textfile / "dircleaner.prom")]
    refused = as_service_user(store, *nightly)
    assert refused.returncode == 2, refused.stderr
    assert f"cannot write in {textfile} (Permission denied)" in refused.stderr
    applied = subprocess.run(
        [tmpfiles, "--create", f"--root={shared_dir}", str(TMPFILES)],
        capture_output=True,
        text=True,
    )
    assert (applied.returncode, applied.stderr) == (0, "")
    mode = textfile.stat()
    assert (mode.st_uid, mode.st_gid, oct(mode.st_mode & 0o7777)) == (0, SERVICE_UID, "0o1775")
    ran = as_service_user(store, *nightly)
    assert ran.returncode == 0, ran.stderr
    written = (textfile / "dircleaner.prom").stat()
    assert written.st_uid == SERVICE_UID and written.st_mode & 0o004  # node_exporter reads it
    assert (
        samples_of((textfile / "dircleaner.prom").read_text())["dircleaner_last_run_success"] == 1
    )


def cron_command(tmp_path: Path) -> tuple[str, Path]:
    """cron.example's command, with its paths moved under ``tmp_path`` (the programs' and the
    environment file's too), and the file its summary goes to."""
    lines = [line for line in CRON.read_text().splitlines() if line and line[0].isdigit()]
    (line,) = [line for line in lines if " run " in line]
    *when, user, command = line.split(None, 6)
    assert (when, user) == (["15", "2", "*", "*", "0"], "meta")  # the full night, on Sunday
    (churn,) = [line for line in lines if " clean --changed " in line]
    assert churn.split(None, 6)[:6] == ["15", "2", "*", "*", "1-6", "meta"]
    assert (
        churn.split(None, 6)[6]
        .replace("-q clean --changed", "-q run --workers 2")
        .replace("dircleaner-churn.prom", "dircleaner.prom")
        == command
    )  # the same environment, lock, audit log and output
    assert "%" not in command  # cron would make it a newline
    moved = {
        "/opt/dircleaner/bin/": str(Path(sys.executable).parent) + "/",
        "/etc/dircleaner/": f"{tmp_path}/etc/",
        "/run/lock/": f"{tmp_path}/",
        "/var/lib/prometheus/node-exporter/": f"{tmp_path}/textfile/",
        "/var/log/dircleaner/": f"{tmp_path}/log/",
    }
    for path, there in moved.items():
        command = command.replace(path, there)
    assert not re.search(r"(^|\s)/(etc|opt|run|var)/", command), command
    for made in ("etc", "textfile", "log"):
        (tmp_path / made).mkdir()
    return command, tmp_path / "log" / "run.log"


def test_the_cron_line_prints_nothing_when_the_run_succeeds_and_the_error_when_it_fails(
    tmp_path: Path,
) -> None:
    """cron mails whatever a job prints: only a failure may print."""
    tool("flock")
    command, log = cron_command(tmp_path)
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = [f"k/{i}/x" for i in range(40)]
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "keys", keys))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", keys[:2]))).exit_code == 0
    (tmp_path / "etc" / "dircleaner.env").write_text(f"DIRCLEANER_STORE={url}\n")
    cron_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh"}

    def nightly() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, env=cron_env, timeout=300
        )

    night = nightly()
    assert (night.returncode, night.stdout, night.stderr) == (0, "", "")
    assert "directories removed" in log.read_text()
    metrics = samples_of((tmp_path / "textfile" / "dircleaner.prom").read_text())
    assert metrics["dircleaner_last_run_success"] == 1
    # A quarter of the store empty the next night: the guard refuses, and says so.
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", keys[2:12]))).exit_code == 0
    night = nightly()
    assert night.returncode == 3
    assert night.stdout == ""
    assert night.stderr.startswith("Error: 12 of 41 directories (29.3%) would be deleted, over")
    assert len(night.stderr.splitlines()) == 1


# -- systemd --------------------------------------------------------------------------------------


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Verified in a scratch root that holds what the units name (the programs they start,
    the environment file) and the system's own units they depend on."""
    analyze = tool("systemd-analyze")
    root = tmp_path / "root"
    system_units = Path("/usr/lib/systemd/system")
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(DEPLOY / unit, root / "etc/systemd/system" / unit)
    named: set[str] = set()
    for unit in UNITS:
        for line in (DEPLOY / unit).read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "ExecStart":
                named.add(value.split()[0])
            elif key == "EnvironmentFile":
                (root / value.lstrip("-/")).parent.mkdir(parents=True, exist_ok=True)
                (root / value.lstrip("-/")).touch()
    assert named == {"/opt/dircleaner/bin/dircleaner", "/opt/dircleaner/bin/dask"}
    for program in named:
        path = root / program.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    result = subprocess.run(
        [analyze, "verify", "--man=no", "--generators=no", f"--root={root}"]
        + [f"/etc/systemd/system/{unit}" for unit in UNITS],
        capture_output=True,
        text=True,
    )
    # A bad setting is only a warning on stderr ("Unknown key …, ignoring"): none is allowed.
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_dask_worker_unit_reads_the_one_worker_settings_file() -> None:
    """scripts/dask-worker.yaml is the one copy (the tests' and the benchmark's workers read
    it too); the unit points DASK_CONFIG at where the docs say to install it."""
    unit = (DEPLOY / "dask-worker.service").read_text()
    assert "Environment=DASK_CONFIG=/etc/dircleaner/dask-worker.yaml" in unit
    assert (ROOT / "scripts" / "dask-worker.yaml").is_file()
    assert not list(DEPLOY.rglob("*.yaml"))


def test_a_missing_tool_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.delenv("DIRCLEANER_REQUIRE_CASSANDRA", raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make tools"):
        tool("promtool")
    monkeypatch.setenv("DIRCLEANER_REQUIRE_CASSANDRA", "1")
    with pytest.raises(pytest.fail.Exception, match="make tools"):
        tool("promtool")
    monkeypatch.delenv("DIRCLEANER_REQUIRE_CASSANDRA")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make tools"):
        tool("promtool")
