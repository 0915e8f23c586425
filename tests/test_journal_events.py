"""S3 bucket notifications as journal input: each server's shape, its key encoding, the records
skipped and the lines refused."""

from __future__ import annotations

import json

import pytest

from dircleaner.journal.events import BadEvent, is_removal, parse_event_line

#: an AWS S3 notification of a delete (as S3 sends it to SQS, SNS or Lambda): the key is
#: URL-encoded as a form value, a space a "+", a "+" "%2B", and "/" left alone
AWS = {
    "Records": [
        {
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": "eu-west-1",
            "eventTime": "2026-11-26T07:28:00.000Z",
            "eventName": "ObjectRemoved:Delete",
            "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
            "requestParameters": {"sourceIPAddress": "203.0.113.5"},
            "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMy="},
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "dircleaner",
                "bucket": {
                    "name": "photos",
                    "ownerIdentity": {"principalId": "A3NL1KOZZKEXAMPLE"},
                    "arn": "arn:aws:s3:::photos",
                },
                "object": {"key": "2026/red+flower%2B1.jpg", "sequencer": "0055AED6DCD90281E5"},
            },
        }
    ]
}
#: a MinIO webhook or queue message: the same records inside EventName/Key, the event name
#: with an "s3:" prefix, and the key encoded as a query value ("/" as %2F)
MINIO = {
    "EventName": "s3:ObjectRemoved:Delete",
    "Key": "photos/2026/red flower.jpg",
    "Records": [
        {
            "eventVersion": "2.0",
            "eventSource": "minio:s3",
            "awsRegion": "",
            "eventTime": "2026-11-26T07:28:00.123Z",
            "eventName": "s3:ObjectRemoved:Delete",
            "userIdentity": {"principalId": "minioadmin"},
            "requestParameters": {"principalId": "minioadmin", "sourceIPAddress": "127.0.0.1"},
            "responseElements": {"x-amz-request-id": "17A3B0C6F1E2D4C8"},
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "Config",
                "bucket": {"name": "photos", "arn": "arn:aws:s3:::photos"},
                "object": {"key": "2026%2Fred+flower.jpg", "sequencer": "17A3B0C6F2A1B3D4"},
            },
            "source": {"host": "127.0.0.1", "port": "", "userAgent": "MinIO (linux; amd64)"},
        }
    ],
}
#: a Ceph RGW notification: "ceph:s3", and the key as the object's name, not encoded
CEPH = {
    "Records": [
        {
            "eventVersion": "2.2",
            "eventSource": "ceph:s3",
            "awsRegion": "default",
            "eventTime": "2026-11-26T07:28:00.419013Z",
            "eventName": "ObjectRemoved:Delete",
            "userIdentity": {"principalId": "tester"},
            "requestParameters": {"sourceIPAddress": ""},
            "responseElements": {"x-amz-request-id": "89759221.14369.1", "x-amz-id-2": "3821"},
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "notif1",
                "bucket": {"name": "photos", "arn": "arn:aws:s3:default::photos", "id": "x.2"},
                "object": {
                    "key": "2026/a+b%20c.jpg",
                    "size": 0,
                    "eTag": "",
                    "versionId": "",
                    "sequencer": "F7E6D75DC742D108",
                    "metadata": [],
                    "tags": [],
                },
            },
            "eventId": "1700000000.1.abc",
            "opaqueData": "",
        }
    ]
}


def line(message: object) -> str:
    return json.dumps(message)


def test_aws_keys_are_url_decoded_as_form_values() -> None:
    assert parse_event_line(line(AWS)).removed == [("photos", "2026/red flower+1.jpg")]


def test_minio_keys_are_url_decoded_slashes_included() -> None:
    assert parse_event_line(line(MINIO)).removed == [("photos", "2026/red flower.jpg")]


def test_ceph_keys_are_taken_as_they_are() -> None:
    assert parse_event_line(line(CEPH)).removed == [("photos", "2026/a+b%20c.jpg")]


def test_lifecycle_expirations_are_removals_and_other_events_are_skipped() -> None:
    records = []
    for source, name, key in [
        ("aws:s3", "LifecycleExpiration:Delete", "a/1"),
        ("aws:s3", "ObjectCreated:Put", "a/2"),
        ("aws:s3", "ObjectRemoved:DeleteMarkerCreated", "a/3"),
        ("ceph:s3", "ObjectLifecycle:Expiration:Current", "b/1"),
        ("ceph:s3", "s3:ObjectCreated:Put", "b/2"),
        ("minio:s3", "s3:ObjectRemoved:Delete", "c%2F1"),
        ("minio:s3", "s3:ObjectAccessed:Get", "c%2F2"),
    ]:
        record = json.loads(line(AWS["Records"][0]))  # type: ignore[index]
        record.update(eventSource=source, eventName=name)
        record["s3"]["object"]["key"] = key
        records.append(record)
    parsed = parse_event_line(line({"Records": records}))
    assert parsed.removed == [
        ("photos", "a/1"),
        ("photos", "a/3"),
        ("photos", "b/1"),
        ("photos", "c/1"),
    ]
    assert parsed.other == 3
    # One bare record on a line is read as well.
    assert parse_event_line(line(records[0])).removed == [("photos", "a/1")]


def test_s3_test_event_is_skipped() -> None:
    test_event = {
        "Service": "Amazon S3",
        "Event": "s3:TestEvent",
        "Time": "2026-11-26T07:28:00.000Z",
        "Bucket": "photos",
        "RequestId": "5582815E1AEA5ADF",
        "HostId": "8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE",
    }
    assert parse_event_line(line(test_event)).removed == []
    assert parse_event_line(line(test_event)).other == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hello": 1}', 'no "Records"'),
        ('{"Records": {}}', '"Records" is not a list'),
        ('{"Records": [1]}', "record 1 is not a JSON object"),
        (
            '{"Records": [{"eventName": "ObjectRemoved:Delete"}]}',
            "record 1 has no string s3.bucket.name",
        ),
        (
            '{"Records": [{"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"},'
            ' "object": {"key": ""}}}]}',
            "record 1: empty key",
        ),
        (
            '{"Records": [{"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"},'
            ' "object": {"key": "a%00b"}}}]}',
            "record 1: key contains a NUL character",
        ),
    ],
)
def test_what_is_not_a_notification_is_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(BadEvent, match=message):
        parse_event_line(text)


def test_is_removal() -> None:
    assert is_removal("ObjectRemoved:Delete") and is_removal("s3:ObjectRemoved:NoOP")
    assert not is_removal("ObjectCreated:Put") and not is_removal("ObjectRestore:Delete")
