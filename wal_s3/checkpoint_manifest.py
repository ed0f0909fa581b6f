"""Checkpoint manifests: one S3 object per agent flush naming every WAL object it applied.

Why: a checkpoint used to be one empty object per (WAL object, zone). That is one PUT per
notification, billed like the WAL PUT itself (at 8 MiB objects about a third of the
request bill), and a burst of boto3 and S3 work right after every answer (in the router
benchmark on the 2-core host it put 2-3 ms on the p99 of the next produce). An agent now
collects what it applied and writes one manifest per `agent.checkpoint_interval_ms` (or
per `agent.checkpoint_max_keys` keys): requests fall from one per object to one per
interval. GC reads each manifest with one GET (12.5x cheaper than a PUT) and keeps the
parsed content while the manifest lives.

Layout (pure; no trio, no boto3):
  key   <prefix><checkpoint_prefix>/manifests/<zone>/<unix_ms 13 digits>-<16 hex>
  body  {"format": "azsidecar-checkpoint-manifest", "version": 1, "zone": "<zone>",
         "keys": ["<WAL key without prefix>", ...]}
The per-object layout `<prefix><checkpoint_prefix>/<WAL key without prefix>/<zone>` is
still read (checkpoints written by older agents), never written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

FORMAT = "azsidecar-checkpoint-manifest"
VERSION = 1
MANIFEST_DIR = "manifests"
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # far above 10,000 keys of ~60 bytes; a bigger body is not ours
_NAME_RE = re.compile(r"^(?P<zone>[A-Za-z0-9._-]{1,64})/(?P<unix_ms>\d{13})-(?P<token>[0-9a-f]{16})$")


class ManifestError(ValueError):
    """Bytes or a key that are not a checkpoint manifest of this version."""


def manifest_key(prefix: str, checkpoint_prefix: str, zone: str, unix_ms: int, token: str) -> str:
    """The manifest's S3 key. Raises ManifestError for a zone or token that cannot be a key segment."""
    name = f"{zone}/{unix_ms:013d}-{token}"
    if not _NAME_RE.match(name):
        raise ManifestError(f"bad manifest name {name!r} (zone {zone!r}, token {token!r})")
    return f"{prefix}{checkpoint_prefix}/{MANIFEST_DIR}/{name}"


def manifest_zone(relative_to_checkpoints: str) -> str | None:
    """The zone of a manifest, given its key relative to `<prefix><checkpoint_prefix>/`; None if
    the key is not a manifest (a per-object checkpoint, or something else)."""
    head, _, name = relative_to_checkpoints.partition("/")
    if head != MANIFEST_DIR:
        return None
    m = _NAME_RE.match(name)
    return m["zone"] if m else None


def is_manifest_path(relative_to_checkpoints: str) -> bool:
    """True for anything under the manifests directory (valid or not: never a per-object checkpoint)."""
    return relative_to_checkpoints.startswith(MANIFEST_DIR + "/")


def encode_manifest(zone: str, relative_keys: Sequence[str]) -> bytes:
    """The manifest body; keys deduplicated, in first-seen order."""
    keys = list(dict.fromkeys(relative_keys))
    return json.dumps({"format": FORMAT, "version": VERSION, "zone": zone, "keys": keys},
                      separators=(",", ":")).encode()


def decode_manifest(data: bytes) -> tuple[str, tuple[str, ...]]:
    """(zone, relative WAL keys). Raises ManifestError for anything else."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest of {len(data)} bytes exceeds {MAX_MANIFEST_BYTES}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"manifest is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ManifestError("not a checkpoint manifest")
    if doc.get("version") != VERSION:
        raise ManifestError(f"checkpoint manifest version {doc.get('version')!r}; this build reads {VERSION}")
    zone, keys = doc.get("zone"), doc.get("keys")
    if not isinstance(zone, str) or not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ManifestError("checkpoint manifest without a zone string and a list of key strings")
    return zone, tuple(keys)
