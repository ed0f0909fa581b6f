"""The cluster ACL source's error, in a module of its own: the start-up checks shared with the
agent classify it without importing the source and kafka-python's admin protocol behind it."""

from __future__ import annotations

from core.errors import SidecarError


class AclSourceError(SidecarError):
    """DescribeAcls failed: the broker's error (e.g. CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED) or no broker."""
