"""restore --generation / --since / --until / --dry-run: one night out of an appended log."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers import EAGER, invoke, said

#: the issue times a summary ends with (they are the test's own wall clock)
ISSUED = re.compile(r"; deletes issued [0-9T:Z-]+( to [0-9T:Z-]+)?\)")


def without_times(text: str) -> str:
    return ISSUED.sub(")", text)


def test_restore_one_night_of_two(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    audit = tmp_path / "audit.jsonl"
    keys = "".join(f"n/{i}/x\n" for i in range(20))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    nights = []
    for dead in (["n/1/x"], ["n/5/x", "n/6/x", "n/7/x"]):
        assert invoke(url, "delete-keys", "-", input="\n".join(dead) + "\n").exit_code == 0
        result = invoke(url, "run", *EAGER, "--audit-log", str(audit), "--json")
        assert result.exit_code == 0, result.output
        nights.append(json.loads(result.stdout)["build"]["generation"])
    first, second = nights

    store = f"sqlite:objects,folders@{tmp_path.resolve()}/meta.db"
    dry = invoke(url, "restore", str(audit), "--generation", second, "--dry-run")
    assert (dry.exit_code, without_times(dry.output)) == (
        0,
        f"would restore 3 directory entries into {store} (by 3 range; generations: {second})\n",
    )
    assert "n/5/" not in invoke(url, "list-dirs").output  # a dry run writes nothing

    done = invoke(url, "restore", str(audit), "--generation", first)
    assert (done.exit_code, without_times(done.stdout)) == (
        0,
        f"restoring into {store} from {audit}\n"
        f"restored 1 directory entry (by 1 row; generations: {first})\n",
    )
    listed = invoke(url, "list-dirs", "--bucket", "default").output.splitlines()
    assert "n/1/" in listed
    assert not {"n/5/", "n/6/", "n/7/"} & set(listed)

    later = invoke(url, "restore", str(audit), "--since", "2100-01-01", "--dry-run")
    assert later.stdout == (
        f"would restore 0 directory entries into {store} (by none; generations: none)\n"
    )
    # A selection that matches nothing is most likely a typo: said on stderr, as for --bucket.
    warning = (
        f"warning: no entry of {audit} matches --generation/--since/--until/--bucket; the"
        f" generations"
        f" in it: {first}, {second}\n"
    )
    assert later.stderr == warning
    typo = invoke(url, "restore", str(audit), "--generation", second[:-1])
    assert (typo.exit_code, said(typo)) == (0, warning)
    every = invoke(url, "restore", str(audit), "--until", "2100-01-01T00:00:00", "--dry-run")
    assert without_times(every.output) == (
        f"would restore 4 directory entries into {store} (by 3 range, 1 row; generations:"
        f" {first}, {second})\n"
    )
