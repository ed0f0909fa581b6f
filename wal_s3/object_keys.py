"""How WAL objects are named in the bucket: `<prefix><hash4>/wal/<zone>/<writer_id>/<epoch>/<sequence>`.

The writer names what it PUTs, recovery and GC read the names back. A module of its own so
that a reader of names (the agent's checkpoints, GC) does not load the writer and its trio
machinery.
"""

from __future__ import annotations

import hashlib
import re

EPOCH_DIGITS = 10  # zero-padded so keys sort by epoch and sequence
SEQUENCE_DIGITS = 12
HASH_PREFIX_CHARS = 4  # 65536 prefixes spread S3's per-prefix request rate limits
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # zone and writer ids are key path segments


def object_key(prefix: str, zone: str, writer_id: str, epoch: int, sequence: int) -> str:
    """`<prefix><hash4>/wal/<zone>/<writer_id>/<epoch>/<sequence>`; the hash spreads S3 prefixes."""
    tail = f"wal/{zone}/{writer_id}/{epoch:0{EPOCH_DIGITS}d}/{sequence:0{SEQUENCE_DIGITS}d}"
    digest = hashlib.sha256(tail.encode()).hexdigest()[:HASH_PREFIX_CHARS]
    return f"{prefix}{digest}/{tail}"


OBJECT_KEY_RE = re.compile(
    rf"^(?P<hash>[0-9a-f]{{{HASH_PREFIX_CHARS}}})/wal/(?P<zone>[A-Za-z0-9._-]+)/(?P<writer_id>[A-Za-z0-9._-]+)"
    rf"/(?P<epoch>\d{{{EPOCH_DIGITS}}})/(?P<sequence>\d{{{SEQUENCE_DIGITS}}})$")
