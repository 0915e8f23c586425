"""``import-keys``: bad lines reported by number and skipped; the one line it ends with (and
delete-keys, which shares it): counts in the right number ("1 key", "1 line"), and an empty file
said to be one rather than "(0 did not exist)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import invoke


@pytest.fixture()
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/meta.db"


def test_one_key_and_one_line_are_singular(url: str) -> None:
    put = invoke(url, "import-keys", "-", input="a/b\n")
    assert put.stdout == "put 1 key in bucket 'default'; rejected 0 lines\n"
    put = invoke(url, "import-keys", "-", input="a/c\n\nc/d\n")
    assert put.exit_code == 1
    assert put.stdout == "put 2 keys in bucket 'default'; rejected 1 line\n"
    assert "line 2: " in put.stderr
    deleted = invoke(url, "delete-keys", "-", input="a/b\n")
    assert (
        deleted.stdout == "deleted 1 key in bucket 'default' (0 did not exist); rejected 0 lines\n"
    )


def test_a_crlf_file_of_one_line_says_one_line(url: str) -> None:
    put = invoke(url, "import-keys", "-", input=b"a/b\r\n")
    assert put.exit_code == 0, put.output
    assert "stripped the carriage return of 1 line\n" in put.stderr


def test_an_empty_key_file_says_it_holds_no_key(url: str, tmp_path: Path) -> None:
    assert invoke(url, "import-keys", "-", input="a/b\n").exit_code == 0
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    deleted = invoke(url, "delete-keys", str(empty))
    assert (deleted.exit_code, deleted.stdout) == (
        0,
        "deleted 0 keys in bucket 'default' (the file holds no valid key); rejected 0 lines\n",
    )
    put = invoke(url, "import-keys", "-", input="\n")
    assert (put.exit_code, put.stdout) == (
        1,
        "put 0 keys in bucket 'default' (the file holds no valid key); rejected 1 line\n",
    )


def test_thousands_are_separated(url: str) -> None:
    keys = "".join(f"k/{i}\n" for i in range(1200))
    put = invoke(url, "import-keys", "-", input=keys)
    assert put.stdout == "put 1,200 keys in bucket 'default'; rejected 0 lines\n"


def dirs(url: str) -> list[str]:
    return sorted(invoke(url, "list-dirs", "--bucket", "default").output.splitlines())


def test_bad_key_lines_are_reported_by_number_and_good_ones_still_go_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    data = b"ok/1\n\xff\xfebad/utf8\n\nok/2\n" + b"x/" + b"a" * 1023 + b"\nok/3"
    result = invoke(url, "import-keys", "-", input=data)
    assert result.exit_code == 1
    assert "line 2: invalid UTF-8" in result.stderr
    assert "line 3: empty key" in result.stderr
    assert "line 5: key is 1025 UTF-8 bytes" in result.stderr
    assert "put 3 keys" in result.stdout
    assert dirs(url) == ["ok/"]
