"""core/errors.py: the one table of Kafka error codes (retriable, refresh metadata) and the
one exception base whose `retriable` the proxy reads."""

from __future__ import annotations

import pytest

from core import errors
from core.errors import SidecarError, exception_is_retriable
from kafka_upstream.errors import UpstreamError, UpstreamTimeout
from leader_notify.sender.sender import NotifyError
from wal_s3.gc import CheckpointError
from wal_s3.reader import WalNotFoundError, WalReadError
from wal_s3.s3 import S3Error, S3GrayError, S3NotFound, S3TransientError


@pytest.mark.parametrize(("exc", "retriable"), [
    (SidecarError("x"), True),
    (SidecarError("x", retriable=False), False),
    (NotifyError("no agent for zone b", retriable=False), False),
    (NotifyError("agent timed out"), True),
    (WalReadError("zone unreadable"), True),
    (WalNotFoundError("gone"), False),  # garbage-collected or never written: not coming back
    (WalReadError("bad key", retriable=False), False),
    (CheckpointError("S3 kept failing"), True),
    (UpstreamTimeout("no answer"), True),
    (S3Error("denied"), False),
    (S3NotFound("no such key"), False),
    (S3TransientError("503"), True),
    (S3GrayError("hedge spent", retriable=False), False),
    (S3GrayError("gray"), True),
    (ValueError("not ours"), True),  # an unforeseen failure is tried again
    (TimeoutError(), True),
])
def test_retriable_is_read_from_the_base(exc, retriable):
    assert exception_is_retriable(exc) is retriable
    assert str(exc) == (exc.args[0] if exc.args else "")


def test_every_error_with_retriable_shares_the_base():
    for cls in (NotifyError, WalReadError, CheckpointError, UpstreamError, S3Error):
        assert issubclass(cls, SidecarError)


@pytest.mark.parametrize(("code", "retriable", "refresh"), [
    (0, False, False),    # NONE
    (2, True, False),     # CORRUPT_MESSAGE (Kafka's CorruptRecordException is retriable)
    (3, True, True),      # UNKNOWN_TOPIC_OR_PARTITION
    (5, True, True),      # LEADER_NOT_AVAILABLE
    (6, True, True),      # NOT_LEADER_OR_FOLLOWER
    (7, True, False),     # REQUEST_TIMED_OUT
    (10, False, False),   # MESSAGE_TOO_LARGE
    (13, True, True),     # NETWORK_EXCEPTION
    (19, True, False),    # NOT_ENOUGH_REPLICAS
    (20, True, False),    # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (46, False, False),   # DUPLICATE_SEQUENCE_NUMBER: verified, not retried
    (56, True, True),     # KAFKA_STORAGE_ERROR
    (87, False, False),   # INVALID_RECORD
])
def test_the_code_table(code, retriable, refresh):
    assert errors.is_retriable(code) is retriable
    assert (code in errors.REFRESH_METADATA) is refresh
