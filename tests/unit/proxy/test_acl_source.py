"""The cluster's ACLs as the proxy keeps them (proxy/acl_source.py ClusterAcls), above a fake
upstream on trio's virtual clock: read at start, refreshed every interval, the last read
serving through failed refreshes until authz.max_stale_s, then every request denied until a
refresh succeeds; a broker's refusal named in the error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio
from prometheus_client import REGISTRY

from kafka_upstream.errors import UpstreamError
from proxy.acl import Operation, Request, ResourceType
from proxy.acl_errors import AclSourceError
from proxy.acl_source import ClusterAcls

ALICE = Request("User:alice", "10.0.0.5")
REFRESH_S = 10.0
MAX_STALE_S = 35.0
CLUSTER_AUTHORIZATION_FAILED = 31
TOPIC, LITERAL, WRITE, ALLOW = 2, 3, 4, 3


def describe_answer(topics: list[str], error_code: int = 0, error_message: str | None = None) -> SimpleNamespace:
    """A DescribeAclsResponse as kafka-python decodes it: alice may WRITE each topic."""
    acl = SimpleNamespace(principal="User:alice", host="*", operation=WRITE, permission_type=ALLOW)
    return SimpleNamespace(error_code=error_code, error_message=error_message, resources=[
        SimpleNamespace(resource_type=TOPIC, resource_name=t, pattern_type=LITERAL, acls=[acl]) for t in topics])


class FakeUpstream:
    """Answers each DescribeAcls with the next scripted answer: a response, or an exception to raise."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.asked = 0

    async def ensure_api_versions(self) -> dict[int, tuple[int, int]]:
        return {29: (0, 3)}

    def version_for(self, api_key: int, highest: int) -> int:
        return 3

    async def ask_any_broker(self, request, version: int):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def may_write(acls: ClusterAcls, topic: str) -> bool:
    return acls.current().authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, topic)


def failures() -> float:
    return REGISTRY.get_sample_value("azsidecar_proxy_authz_refresh_failures_total") or 0.0


@pytest.mark.trio
async def test_refreshes_apply_and_a_failed_refresh_serves_the_last_acls_until_max_stale(autojump_clock):
    down = UpstreamError("no broker answered")
    # start: orders; 1st refresh: orders and payments; then failures; then payments only
    upstream = FakeUpstream([describe_answer(["orders"]), describe_answer(["orders", "payments"]),
                             down, down, down, down, describe_answer(["payments"])])
    acls = ClusterAcls(upstream, upstream, frozenset(), REFRESH_S, MAX_STALE_S)  # type: ignore[arg-type]
    await acls.refresh()  # the start-up read
    assert (may_write(acls, "orders"), may_write(acls, "payments")) == (True, False)
    failed_before = failures()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(acls.run)
        await trio.sleep(REFRESH_S + 1)  # t=11: read at t=10
        assert (may_write(acls, "orders"), may_write(acls, "payments")) == (True, True)
        await trio.sleep(REFRESH_S * 3)  # t=41: refreshes at 20, 30, 40 failed; read 31 s ago
        assert failures() == failed_before + 3
        assert (may_write(acls, "orders"), may_write(acls, "payments")) == (True, True)
        await trio.sleep(5)  # t=46: 36 s > max_stale_s: every request denied
        assert (may_write(acls, "orders"), may_write(acls, "payments")) == (False, False)
        await trio.sleep(REFRESH_S)  # t=56: the 50 s refresh failed too, the 60 s one will succeed
        assert may_write(acls, "payments") is False
        await trio.sleep(REFRESH_S)  # t=66
        assert (may_write(acls, "orders"), may_write(acls, "payments")) == (False, True)
        assert failures() == failed_before + 4
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_nothing_is_allowed_before_the_first_read(autojump_clock):
    acls = ClusterAcls(FakeUpstream([describe_answer(["orders"])]), None, frozenset(),  # type: ignore[arg-type]
                       REFRESH_S, MAX_STALE_S)
    assert may_write(acls, "orders") is False


@pytest.mark.trio
async def test_a_refusal_by_the_cluster_is_an_error_naming_the_code(autojump_clock):
    refused = describe_answer([], CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    upstream = FakeUpstream([refused])
    acls = ClusterAcls(upstream, upstream, frozenset(), REFRESH_S, MAX_STALE_S)  # type: ignore[arg-type]
    with pytest.raises(AclSourceError, match=r"refused by the cluster \(error 31\): Cluster authorization failed"):
        await acls.refresh()


@pytest.mark.trio
async def test_no_broker_is_an_error_too(autojump_clock):
    upstream = FakeUpstream([UpstreamError("no broker of [b1:9092] answered")])
    acls = ClusterAcls(upstream, upstream, frozenset(), REFRESH_S, MAX_STALE_S)  # type: ignore[arg-type]
    with pytest.raises(AclSourceError, match=r"DescribeAcls: no broker of \[b1:9092\] answered"):
        await acls.refresh()
