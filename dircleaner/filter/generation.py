"""Filter generation ids: sortable by time, and carrying the salt and snapshot of the build.

``20261122T021500.123456Z-5f3a9c01`` is the build's snapshot time (µs, UTC) and its salt. Hosts
that build shards of one generation (``build --shard i/n --generation G``) derive the same salt
and snapshot from the id, so their partial filters OR-merge.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from dircleaner.errors import UsageError

_ID = re.compile(r"^(\d{8}T\d{6})\.(\d{6})Z-([0-9a-f]{8})$")


def new_generation_id(snapshot_us: int, salt: int) -> str:
    """The id of a generation built from ``snapshot_us`` with ``salt``."""
    stamp = datetime.fromtimestamp(snapshot_us // 1_000_000, UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}.{snapshot_us % 1_000_000:06d}Z-{salt:08x}"


def fresh_generation_id(now_us: int) -> str:
    """A new id at ``now_us`` with a random salt."""
    return new_generation_id(now_us, secrets.randbits(32))


def parse_generation_id(generation: str) -> tuple[int, int]:
    """(snapshot µs, salt) of a generation id."""
    match = _ID.match(generation)
    if not match:
        raise UsageError(
            f"invalid generation id {generation!r} (expected e.g. 20261122T021500.000000Z-5f3a9c01;"
            " 'dircleaner filters new-id' makes one)"
        )
    stamp, micros, salt = match.groups()
    seconds = datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1_000_000 + int(micros), int(salt, 16)
