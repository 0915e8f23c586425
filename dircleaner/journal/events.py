"""S3 bucket notifications as the journal's input: the objects an ``ObjectRemoved`` record
names, from the JSON that AWS S3, MinIO and Ceph RGW send.

The three shapes (one JSON object per line, as a queue consumer or a webhook would log them):

- **AWS S3**: ``{"Records": [{"eventSource": "aws:s3", "eventName": "ObjectRemoved:Delete",
  "s3": {"bucket": {"name": …}, "object": {"key": …}}}, …]}``; the key is URL-encoded as a
  form value (``red flower.jpg`` is ``red+flower.jpg``, ``/`` stays). Lifecycle expirations come
  as ``LifecycleExpiration:Delete`` (or ``…:DeleteMarkerCreated``); S3's ``s3:TestEvent``
  message has no records.
- **MinIO**: the same records with ``"eventSource": "minio:s3"`` and an ``s3:`` prefix on the
  event name (``s3:ObjectRemoved:Delete``), inside ``{"EventName": …, "Key": …, "Records":
  […]}``; the key is URL-encoded as a query value (``/`` is ``%2F``, a space ``+``).
- **Ceph RGW**: ``"eventSource": "ceph:s3"``, event names with or without the ``s3:`` prefix,
  lifecycle expirations as ``ObjectLifecycle:Expiration:Current`` (``…:NonCurrent``,
  ``…:DeleteMarker``); the key is the object's name as it is, not encoded.

So a key is URL-decoded (``unquote_plus``) unless its record comes from ``ceph:``. A line may
also hold one bare record. Records of other events (puts, copies, restores) are counted and
skipped: a notification configured for more than removals is fine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from dircleaner.errors import UsageError
from dircleaner.paths import validate_bucket, validate_key

#: event names (after an ``s3:`` prefix) that say an object is gone
REMOVAL_PREFIXES = ("ObjectRemoved:", "LifecycleExpiration:", "ObjectLifecycle:Expiration:")
#: event sources whose keys are not URL-encoded
RAW_KEY_SOURCES = ("ceph:",)


class BadEvent(UsageError):
    """A line is not an S3 event notification this parser knows."""


@dataclass(frozen=True, slots=True)
class EventLine:
    """What one line of notifications holds."""

    #: ``(bucket, key)`` of every object its removal records name, in order
    removed: list[tuple[str, str]] = field(default_factory=list)
    #: records of other events (and test messages), skipped
    other: int = 0


def parse_event_line(text: str) -> EventLine:
    """The removed objects of one line; BadEvent (one line, what is wrong) otherwise."""
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadEvent(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(message, dict):
        raise BadEvent("not a JSON object")
    if "Records" in message:
        records = message["Records"]
        if not isinstance(records, list):
            raise BadEvent('"Records" is not a list')
    elif "eventName" in message:
        records = [message]
    elif str(message.get("Event", "")).endswith("TestEvent"):
        return EventLine(other=1)
    else:
        raise BadEvent('no "Records" (not an S3 event notification)')
    removed: list[tuple[str, str]] = []
    other = 0
    for number, record in enumerate(records, start=1):
        found = _removed_object(record, number)
        if found is None:
            other += 1
        else:
            removed.append(found)
    return EventLine(removed, other)


def is_removal(event_name: str) -> bool:
    """Whether an event name (``ObjectRemoved:Delete``, ``s3:ObjectRemoved:…``, …) says an
    object is gone."""
    name = event_name.removeprefix("s3:")
    return name.startswith(REMOVAL_PREFIXES)


def _removed_object(record: Any, number: int) -> tuple[str, str] | None:
    if not isinstance(record, dict):
        raise BadEvent(f"record {number} is not a JSON object")
    name = record.get("eventName")
    if not isinstance(name, str):
        raise BadEvent(f'record {number} has no "eventName"')
    if not is_removal(name):
        return None
    bucket = _field(record, ("s3", "bucket", "name"), number)
    raw = _field(record, ("s3", "object", "key"), number)
    source = str(record.get("eventSource", ""))
    key = raw if source.startswith(RAW_KEY_SOURCES) else unquote_plus(raw)
    try:
        validate_bucket(bucket)
        validate_key(key)
    except UsageError as exc:
        raise BadEvent(f"record {number}: {exc}") from None
    return bucket, key


def _field(record: dict[str, Any], path: tuple[str, ...], number: int) -> str:
    value: Any = record
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    if not isinstance(value, str):
        raise BadEvent(f"record {number} has no string {'.'.join(path)}")
    return value
