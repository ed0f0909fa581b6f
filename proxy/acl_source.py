"""Where the proxy's ACLs come from, kept current: a fixed set (file, deny-all) or the
cluster's own ACLs, read with DescribeAcls and refreshed.

Strategy (source "cluster"): at start-up one DescribeAcls (every binding, any principal)
must succeed - a sidecar that may not describe the cluster's ACLs stops with the broker's
error. Then a task asks again every `refresh_interval_s`. When a refresh fails, the last
ACLs read keep serving until `max_stale_s` after they were read (stale but bounded: a
broker restart or a network blip does not refuse every producer); after that every
request is denied until a refresh succeeds (`acls_in_force`, pure). Each request reads
`current()` once: no lock, the set is immutable and replaced whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio
from kafka.protocol.admin import DescribeAclsRequest

from core import errors
from kafka_upstream.errors import UpstreamError
from kafka_upstream.metadata import MetadataCache
from kafka_upstream.upstream import UpstreamCluster
from proxy import metrics
from proxy.acl import AclSet
from proxy.acl_errors import AclSourceError
from proxy.acl_rules import bindings_from_describe

log = logging.getLogger(__name__)

DENY_ALL = AclSet()
ANY = 1  # Kafka's ANY for resource type, pattern type, operation and permission filters
API_DESCRIBE_ACLS = 29
HIGHEST_DESCRIBE_ACLS_VERSION = 3  # kafka-python's classes decode v0-v3


@dataclass(frozen=True)
class Snapshot:
    acls: AclSet
    read_at: float  # trio clock


def acls_in_force(last: Snapshot | None, now: float, max_stale_s: float) -> AclSet:
    """The rules to judge with (pure): the last read, unless it is older than `max_stale_s`."""
    if last is None or now - last.read_at > max_stale_s:
        return DENY_ALL
    return last.acls


class FixedAcls:
    """Rules that do not change (an ACL file, or none: deny everything)."""

    def __init__(self, acls: AclSet) -> None:
        self._acls = acls

    def current(self) -> AclSet:
        return self._acls


class ClusterAcls:
    """The cluster's ACLs as the sidecar's principal sees them with DescribeAcls."""

    def __init__(self, cluster: UpstreamCluster, metadata: MetadataCache, super_users: frozenset[str], refresh_interval_s: float,
                 max_stale_s: float, clock: Callable[[], float] = trio.current_time) -> None:
        self._cluster = cluster
        self._metadata = metadata
        self._super_users = super_users
        self._refresh_interval_s = refresh_interval_s
        self._max_stale_s = max_stale_s
        self._clock = clock
        self._last: Snapshot | None = None
        self._stale_logged = False
        self.refreshed = trio.Event()  # set after each successful refresh (tests wait on it), then replaced

    def current(self) -> AclSet:
        return acls_in_force(self._last, self._clock(), self._max_stale_s)

    async def refresh(self) -> None:
        """One DescribeAcls; replaces the rules. Raises AclSourceError."""
        try:
            await self._cluster.ensure_api_versions()
            version = self._cluster.version_for(API_DESCRIBE_ACLS, HIGHEST_DESCRIBE_ACLS_VERSION)
            request = DescribeAclsRequest(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
                                          principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
            response = await self._metadata.ask_any_broker(request, version)
        except UpstreamError as exc:
            raise AclSourceError(f"DescribeAcls: {exc}") from exc
        if response.error_code != errors.NONE:
            raise AclSourceError(f"DescribeAcls refused by the cluster (error {response.error_code}): "
                                 f"{response.error_message or ''}".rstrip(": "))
        bindings, skipped = bindings_from_describe(response.resources)
        self._last = Snapshot(AclSet.of(bindings, self._super_users), self._clock())
        metrics.AUTHZ_ACLS.set(len(bindings))
        if self._stale_logged:
            log.info("authz: ACLs read from the cluster again (%d bindings)", len(bindings))
            self._stale_logged = False
        log.debug("authz: %d ACL bindings from the cluster (%d of other resource types skipped)", len(bindings),
                  skipped)
        refreshed, self.refreshed = self.refreshed, trio.Event()
        refreshed.set()

    async def run(self) -> None:
        """Refresh every `refresh_interval_s` until cancelled; failures are logged and counted."""
        while True:
            await trio.sleep(self._refresh_interval_s)
            try:
                with trio.fail_after(max(self._refresh_interval_s, 5.0)):
                    await self.refresh()
            except (AclSourceError, trio.TooSlowError) as exc:
                metrics.AUTHZ_REFRESH_FAILURES.inc()
                last = self._last
                age = self._clock() - last.read_at if last is not None else float("inf")
                if age > self._max_stale_s:
                    if not self._stale_logged:
                        log.error("authz: ACLs older than authz.max_stale_s (%.0f s): denying every request until "
                                  "DescribeAcls succeeds: %s", self._max_stale_s, exc)
                        self._stale_logged = True
                else:
                    log.warning("authz: ACL refresh failed, serving the ACLs read %.0f s ago: %s", age, exc)
