"""Tests of key-file reading: exact keys, per-line errors with line numbers."""

from __future__ import annotations

import io

import pytest

from dircleaner.cli.keyfile import KeyLine, LineEndings, read_key_lines


def read(*lines: bytes) -> list[KeyLine]:
    return list(read_key_lines(lines))


def test_good_keys_are_returned_with_their_line_numbers() -> None:
    assert read(b"a/b/c.txt\n", b"dir/\n", b"root.txt") == [
        KeyLine(1, "a/b/c.txt"),
        KeyLine(2, "dir/"),
        KeyLine(3, "root.txt"),  # the last line may lack a newline
    ]


def test_only_the_trailing_newline_is_stripped() -> None:
    # The first line ends in LF alone: a Unix file, so a later CR is part of its key.
    assert read(b"  spaced  \n", b"crlf\r\n", b"\ttab\t\n", b"double\n\n", b"\r\n") == [
        KeyLine(1, "  spaced  "),
        KeyLine(2, "crlf\r"),
        KeyLine(3, "\ttab\t"),
        KeyLine(4, "double\n"),
        KeyLine(5, "\r"),
    ]


def test_a_file_starting_with_crlf_has_every_crlf_stripped() -> None:
    endings = LineEndings()
    lines = [b"a\r\n", b"b\n", b"c\r\n", b"d\r"]
    assert list(read_key_lines(lines, endings)) == [
        KeyLine(1, "a"),
        KeyLine(2, "b"),
        KeyLine(3, "c"),
        KeyLine(4, "d\r"),
    ]
    assert endings == LineEndings(crlf=True, stripped=2)


def test_binary_file_lines_split_on_newline_only() -> None:
    stream = io.BytesIO(b"a\rb\nc\r\n d \n")
    assert list(read_key_lines(stream)) == [
        KeyLine(1, "a\rb"),
        KeyLine(2, "c\r"),
        KeyLine(3, " d "),
    ]


def test_utf8_keys_are_decoded() -> None:
    assert read("ü/ñ/é.txt\n".encode()) == [KeyLine(1, "ü/ñ/é.txt")]


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b"bad\xff\n", 3),
        (b"\xc3\n", 0),  # truncated 2-byte sequence
        (b"ab\xc0\xaf\n", 2),  # overlong encoding of '/'
        (b"x\xed\xa0\x80\n", 1),  # an encoded surrogate
        (b"\x80", 0),  # lone continuation byte, no newline
    ],
)
def test_invalid_utf8_is_reported_with_line_number_and_offset(raw: bytes, offset: int) -> None:
    assert read(b"ok\n", raw, b"fine\n") == [
        KeyLine(1, "ok"),
        KeyLine(2, None, f"invalid UTF-8 at byte {offset}"),
        KeyLine(3, "fine"),
    ]


def test_an_empty_line_is_an_error() -> None:
    assert read(b"a\n", b"\n", b"b\n") == [
        KeyLine(1, "a"),
        KeyLine(2, None, "empty key"),
        KeyLine(3, "b"),
    ]


def test_a_1024_byte_key_is_accepted() -> None:
    key = "é" * 512
    assert read(key.encode() + b"\n") == [KeyLine(1, key)]


def test_a_1025_byte_key_is_rejected() -> None:
    raw = ("é" * 512 + "a").encode()
    assert len(raw) == 1025
    assert read(b"x\n", raw + b"\n") == [
        KeyLine(1, "x"),
        KeyLine(2, None, "key is 1025 UTF-8 bytes, over the 1024-byte limit"),
    ]


def test_the_newline_does_not_count_towards_the_limit() -> None:
    raw = b"k" * 1024
    assert read(raw + b"\n") == [KeyLine(1, "k" * 1024)]


def test_trailing_spaces_count_towards_the_limit() -> None:
    raw = b"k" * 1024 + b" "
    assert read(raw + b"\n") == [
        KeyLine(1, None, "key is 1025 UTF-8 bytes, over the 1024-byte limit")
    ]


def test_a_nul_byte_is_rejected() -> None:
    assert read(b"a\x00b\n") == [KeyLine(1, None, "key contains a NUL character")]


def test_reading_is_lazy() -> None:
    def lines() -> object:
        yield b"first\n"
        raise AssertionError("read past the first line")

    reader = read_key_lines(lines())  # type: ignore[arg-type]
    assert next(reader) == KeyLine(1, "first")
