"""The IAM policies of modules/iam allow every S3 request the code really makes.

Each role's code runs against the real moto S3 server with its own boto3 client: the
proxy's WAL writer (epoch, objects), a restarted proxy's recovery of acknowledged
(ack_mode wal) entries, the agent's zone reads and checkpoints, a GC pass, the audit
writers' uploads and the audit job's staging of its input. A botocore hook records every
request (operation, key or prefix); each is then checked against that role's policy
document as written in the HCL, with a small evaluator for the statement shapes the module
uses (Allow, exact actions, resource globs, StringLike on s3:prefix).

Why not let moto enforce IAM: moto ignores the s3:prefix condition (it has no value for
it), so the narrowing that matters most would go untested. KMS is not modelled (moto's S3
does not call KMS); the KMS statements are checked by hand in test_terraform.py.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tempfile
import time
from collections.abc import Callable

import pytest
import trio

from deploy.local.processes import DUMMY_CREDENTIALS
from tests.integration.deploy._hcl import MODULES, attr, blocks, parse, resources

pytestmark = pytest.mark.integration

WAL_PREFIX = "wal/"  # modules/iam var.prefixes defaults, which the example passes on unchanged
LAYOUT = {"var.prefixes.wal": WAL_PREFIX, "var.prefixes.epoch_segment": "_epochs",
          "var.prefixes.checkpoint_segment": "_checkpoints", "var.prefixes.audit": "audit/"}
EXPR = re.compile(r"\$\{([a-z_.]+)\}")


def _evaluate(text: str, values: dict[str, str]) -> str:
    """Substitute "${name}" references; anything else is refused (not a shape we evaluate)."""
    def one(m: re.Match) -> str:
        if m.group(1) not in values:
            raise AssertionError(f"cannot evaluate ${{{m.group(1)}}} in {text!r}")
        return values[m.group(1)]
    out = EXPR.sub(one, text)
    assert "${" not in out, f"unsupported expression in {text!r}"
    return out


def policy(name: str, bucket: str) -> list[dict]:
    """The statements of modules/iam data.aws_iam_policy_document.<name>, values filled in."""
    values = {"var.bucket_arn": f"arn:aws:s3:::{bucket}", **LAYOUT}
    for block in parse(MODULES / "iam" / "main.tf")["locals"]:
        for local in ("wal_objects", "checkpoint_objects", "audit_objects"):
            if local in block:
                values[f"local.{local}"] = _evaluate(attr(block, local), values)
    statements = []
    for s in blocks(resources(MODULES / "iam", "data")[("aws_iam_policy_document", name)], "statement"):
        assert attr(s, "effect", "Allow") == "Allow"
        actions = attr(s, "actions")
        if any(a.startswith("kms:") for a in actions):
            continue  # not modelled here
        conditions = []
        for c in blocks(s, "condition"):
            assert (attr(c, "test"), attr(c, "variable")) == ("StringLike", "s3:prefix"), c
            conditions.append([_evaluate(v, values) for v in attr(c, "values")])
        statements.append({"actions": set(actions), "resources": [_evaluate(r, values) for r in attr(s, "resources")],
                           "prefix_like": conditions})
    return statements


def _like(pattern: str, value: str) -> bool:
    """IAM StringLike and resource matching: '*' any run of characters, '?' one character."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def allowed(statements: list[dict], action: str, resource: str, prefix: str | None) -> bool:
    for s in statements:
        if action not in s["actions"] or not any(_like(r, resource) for r in s["resources"]):
            continue
        # A StringLike on s3:prefix fails when the request carries no prefix, as in IAM.
        if all(prefix is not None and any(_like(p, prefix) for p in values) for values in s["prefix_like"]):
            return True
    return False


def needed(operation: str, params: dict, bucket: str) -> list[tuple[str, str, str | None]]:
    """(IAM action, resource ARN, s3:prefix) an S3 API call needs."""
    def obj(key: str) -> str:
        return f"arn:aws:s3:::{bucket}/{key}"
    if operation in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"):
        return [("s3:PutObject", obj(params["Key"]), None)]
    if operation in ("GetObject", "HeadObject"):
        return [("s3:GetObject", obj(params["Key"]), None)]
    if operation == "AbortMultipartUpload":
        return [("s3:AbortMultipartUpload", obj(params["Key"]), None)]
    if operation in ("ListObjectsV2", "ListObjects"):
        return [("s3:ListBucket", f"arn:aws:s3:::{bucket}", params.get("Prefix", ""))]
    if operation == "DeleteObjects":
        return [("s3:DeleteObject", obj(o["Key"]), None) for o in params["Delete"]["Objects"]]
    if operation == "DeleteObject":
        return [("s3:DeleteObject", obj(params["Key"]), None)]
    raise AssertionError(f"S3 operation {operation} is not mapped to an IAM action here")


class Recorder:
    """S3 calls by role. Clients built by the code itself (boto3.client in the audit code)
    are recorded through boto3's default session, under the role set in `current`."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[str, dict]]] = {}
        self.current = "unset"

    def hook(self, role: str | None = None) -> Callable:
        def record(params, model, **_kwargs):
            self.calls.setdefault(role or self.current, []).append((model.name, dict(params)))
        return record

    def client(self, role: str, make: Callable, config):
        c = make(config)
        c.meta.events.register("provide-client-params.s3.*", self.hook(role))
        return c


@pytest.fixture
def recorder(monkeypatch, tmp_path):
    import boto3

    for k, v in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the audit writer stages files here
    rec = Recorder()
    session = boto3.session.Session()
    session.events.register("provide-client-params.s3.*", rec.hook())
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
    return rec


@pytest.mark.trio
async def test_every_s3_request_of_each_role_is_allowed_by_its_policy(s3_bucket, recorder, tmp_path):
    from leader_notify.sender.recovery import recover_acknowledged
    from spark_audit._io import stage_s3
    from spark_audit.config import AuditConfig
    from spark_audit.writer import AuditWriter
    from wal_s3.config import WalConfig
    from wal_s3.format import WalEntry
    from wal_s3.gc import Checkpoints, run_gc
    from wal_s3.reader import WalReader
    from wal_s3.s3 import make_s3_client
    from wal_s3.writer import WalWriter

    server, bucket = s3_bucket
    # boto3 for every call, so the hook sees each request. The h11 transport (the default for
    # WAL PUTs and ranged GETs) sends the same PutObject and GetObject requests on the same
    # keys (tests/integration/wal_s3/test_s3_http.py shows them on the wire).
    config = WalConfig(bucket=bucket, region="us-east-1", prefix=WAL_PREFIX, endpoint_url=server.endpoint_url,
                       retry_base_ms=1, retry_max_ms=5, max_attempts=2, s3_transport="boto3")
    audit_uri = f"s3://{bucket}/audit/"  # modules/wal-bucket output audit_output
    audit_config = AuditConfig(output=audit_uri, s3_endpoint_url=server.endpoint_url, roll_bytes=1024)

    def entry(topic: str) -> WalEntry:
        return WalEntry(topic, 0, 7, 0, 0, 1, b"opaque record batch")

    # proxy, epoch 1: one object with shares for two zones; only az2 will apply its share.
    # linger_ms is long so both entries are in the open object when close() flushes it.
    proxy_audit = AuditWriter(audit_config, "az1", "proxy")
    first_config = dataclasses.replace(config, linger_ms=60_000)
    writer = WalWriter(first_config, "az1", "sc-1", recorder.client("proxy", make_s3_client, config), proxy_audit)
    placements = {}

    async def put(zone: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        placements[zone] = await writer.append(entry(f"acked-{zone}"), zone, task_status=task_status)
    with trio.fail_after(30):
        async with writer.running():
            async with trio.open_nursery() as nursery:
                for zone in ("az2", "az3"):
                    await nursery.start(put, zone)
                writer.close()
    key = placements["az2"].key
    assert placements["az3"].key == key

    # agent of az2: reads its share, marks it applied.
    agent_audit = AuditWriter(audit_config, "az2", "agent")
    agent_s3 = recorder.client("agent", make_s3_client, config)
    with trio.fail_after(30):
        entries = await WalReader(config, agent_s3, agent_audit, "az2").read_zone_by_name(key, "az2")
        assert [e.topic for e in entries] == ["acked-az2"]
        await Checkpoints(config, agent_s3).mark_applied(key, "az2")

    # proxy restarts (epoch 2) and recovers: az3's share is unapplied and acknowledged.
    class NoAgent:  # what a sender answers when the zone's agent cannot be reached
        async def notify(self, obj, zone):
            from leader_notify.sender.sender import NotifyError
            raise NotifyError(f"no agent for {zone} in this test")

    restarted = WalWriter(config, "az1", "sc-1", recorder.client("proxy", make_s3_client, config), proxy_audit)
    with trio.fail_after(30):
        epoch = await restarted.register_epoch()
        report = await recover_acknowledged(config, recorder.client("proxy", make_s3_client, config), NoAgent(),
                                            "sc-1", epoch, lambda topic: topic.startswith("acked-"))
    assert epoch == 2 and report.scanned == 1
    assert [(k, z) for k, z, _ in report.failed] == [(key, "az3")]  # listed, read, tried: not refused

    # gc: keeps the held object (acknowledged, unapplied), then deletes it once az3 applied.
    gc_s3 = recorder.client("gc", make_s3_client, config)
    with trio.fail_after(30):
        held = await run_gc(config, gc_s3, acked_topic=lambda topic: topic.startswith("acked-"),
                            now_s=time.time() + 10 * 86_400)  # past max_orphan_age_s
        await Checkpoints(config, agent_s3).mark_applied(key, "az3")
        done = await run_gc(config, gc_s3)
    assert held.deleted == () and done.deleted == (key,) and done.checkpoints_deleted == 2

    # The audit writers upload on close; the audit job stages what they wrote.
    for role, audit in (("proxy", proxy_audit), ("agent", agent_audit)):
        recorder.current = role
        assert audit.close(), role
        assert audit.stats().upload_errors == 0, role
    recorder.current = "audit_reader"
    assert stage_s3(audit_uri, tmp_path / "staged", server.endpoint_url) >= 2

    calls = recorder.calls
    assert set(calls) == {"proxy", "agent", "gc", "audit_reader"}
    operations = {role: {op for op, _ in c} for role, c in calls.items()}
    # The recording saw the requests that matter (a silent hook would pass everything).
    assert {"PutObject", "ListObjectsV2", "GetObject"} <= operations["proxy"]
    assert {"GetObject", "PutObject"} <= operations["agent"]
    assert {"ListObjectsV2", "HeadObject", "GetObject", "DeleteObjects"} <= operations["gc"]
    assert {"ListObjectsV2", "GetObject"} <= operations["audit_reader"]
    refused = []
    for role, role_calls in calls.items():
        statements = policy(role, bucket)
        for operation, params in role_calls:
            for action, resource, prefix in needed(operation, params, bucket):
                if not allowed(statements, action, resource, prefix):
                    refused.append((role, operation, action, resource, prefix))
    assert refused == []


def test_the_evaluator_refuses_what_iam_refuses():
    """The checks above can fail: requests outside each policy are refused by the evaluator."""
    b = "bkt"
    proxy, agent, gc, reader = (policy(n, b) for n in ("proxy", "agent", "gc", "audit_reader"))
    wal_key = "arn:aws:s3:::bkt/wal/0a1b/wal/az1/sc-1/0000000001-0000000000"
    assert allowed(proxy, "s3:PutObject", wal_key, None)
    assert not allowed(proxy, "s3:DeleteObject", wal_key, None)
    assert not allowed(proxy, "s3:ListBucket", "arn:aws:s3:::bkt", "audit/")
    assert not allowed(proxy, "s3:ListBucket", "arn:aws:s3:::bkt", None)  # no prefix: the condition fails
    assert not allowed(proxy, "s3:PutObject", "arn:aws:s3:::other/wal/x", None)
    assert not allowed(agent, "s3:PutObject", wal_key, None)  # only checkpoints and audit records
    assert allowed(agent, "s3:PutObject", "arn:aws:s3:::bkt/wal/_checkpoints/0a1b/wal/az1/x/az2", None)
    assert not allowed(agent, "s3:ListBucket", "arn:aws:s3:::bkt", "wal/")
    assert not allowed(gc, "s3:PutObject", wal_key, None)
    assert not allowed(gc, "s3:DeleteObject", "arn:aws:s3:::bkt/audit/date=2026-01-01/x.json", None)
    assert not allowed(reader, "s3:GetObject", wal_key, None)
    assert not allowed(reader, "s3:ListBucket", "arn:aws:s3:::bkt", "audit")  # "audit/*" needs the slash
