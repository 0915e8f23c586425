"""Key files with CRLF line endings: the carriage returns are stripped, and the operator told."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import invoke, said


def test_a_crlf_key_file_is_stripped_and_said_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    (tmp_path / "k.txt").write_bytes(b"a/b/x\r\na/c/y\r\nlast/z")
    result = invoke(url, "import-keys", str(tmp_path / "k.txt"))
    assert result.exit_code == 0
    assert result.stdout == "put 3 keys in bucket 'default'; rejected 0 lines\n"
    assert said(result) == (
        "CRLF line endings (a Windows file): stripped the carriage return of 2 lines\n"
    )
    listed = invoke(url, "list-dirs", "--bucket", "default", "--sort")
    assert listed.output == "a/\na/b/\na/c/\nlast/\n"
    deleted = invoke(url, "delete-keys", "-", input=b"a/c/y\r\n")
    assert (
        deleted.stdout == "deleted 1 key in bucket 'default' (0 did not exist); rejected 0 lines\n"
    )


def test_a_carriage_return_inside_a_unix_file_stays_part_of_the_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    result = invoke(url, "import-keys", "-", input=b"a/b\nodd\r/x\r\n")
    assert (result.exit_code, said(result)) == (0, "")
    listed = invoke(url, "list-dirs", "--bucket", "default", "--sort")
    assert listed.output == "a/\nodd\r/\n"
