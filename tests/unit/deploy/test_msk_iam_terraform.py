"""The three-az-msk example runs MSK with TLS in transit and IAM client authentication, and
the IAM module grants exactly the kafka-cluster actions the sidecar and the agent need,
scoped to the cluster and the named topics (parsed HCL, expectations written by hand)."""

from __future__ import annotations

import re

from tests.integration.deploy._hcl import EXAMPLE, MODULES, ROOT, attr, blocks, module_calls, parse, resources

# Every Kafka request class the proxy and the agent send upstream, and the MSK IAM actions
# the broker checks for it (AWS's "IAM access control" action table). A new request class
# in the code fails test_every_upstream_request_has_its_iam_actions until it is mapped here.
IAM_ACTIONS_BY_REQUEST = {
    "ApiVersionsRequest": {"kafka-cluster:Connect"},
    "SaslHandshakeRequest": {"kafka-cluster:Connect"},
    "SaslAuthenticateRequest": {"kafka-cluster:Connect"},
    "MetadataRequest": {"kafka-cluster:DescribeTopic", "kafka-cluster:DescribeCluster"},
    # Produce: WriteData on the topic; batches with a producer id also WriteDataIdempotently on the cluster.
    "ProduceRequest": {"kafka-cluster:WriteData", "kafka-cluster:WriteDataIdempotently"},
    "InitProducerIdRequest": {"kafka-cluster:WriteDataIdempotently"},  # idempotent producers, forwarded
    "FetchRequest": {"kafka-cluster:ReadData"},  # a partition's tail, to verify a DUPLICATE_SEQUENCE_NUMBER
    "ListOffsetsRequest": {"kafka-cluster:DescribeTopic"},
    "OffsetRequest": {"kafka-cluster:DescribeTopic"},  # aiokafka's name for ListOffsets
    # Coordinator lookups for transactional producers and groups (kafka_upstream/coordinators.py); the
    # transaction and group requests after them are forwarded as bytes, under the same statement.
    "FindCoordinatorRequest": {"kafka-cluster:DescribeTransactionalId", "kafka-cluster:DescribeGroup"},
    # authz.source "cluster" only (proxy/acl_source.py): the cluster's ACLs. On an IAM cluster the
    # ACLs are not what MSK enforces (authz.source "file" is meant there), but the call is allowed.
    "DescribeAclsRequest": {"kafka-cluster:DescribeCluster"},
}
CLUSTER_ACTIONS = {"kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently"}
TOPIC_ACTIONS = {"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:ReadData"}
TXN_GROUP_ACTIONS = {"kafka-cluster:DescribeTransactionalId", "kafka-cluster:AlterTransactionalId",
                     "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"}
REQUEST_IMPORT = re.compile(r"^from (?:kafka|aiokafka)\.protocol[\w.]* import \(?([^)]*?)\)?$", re.MULTILINE | re.DOTALL)


def _example_main() -> dict:
    return parse(EXAMPLE / "main.tf")


def test_example_msk_uses_tls_in_transit_and_iam_client_authentication():
    msk = resources(EXAMPLE)[("aws_msk_cluster", "this")]
    (auth,) = blocks(msk, "client_authentication")
    assert attr(auth, "unauthenticated") is False
    assert attr(blocks(auth, "sasl")[0], "iam") is True
    (transit,) = blocks(blocks(msk, "encryption_info")[0], "encryption_in_transit")
    assert (attr(transit, "client_broker"), attr(transit, "in_cluster")) == ("TLS", True)
    assert "CKV_AWS_81" not in (EXAMPLE / "main.tf").read_text()  # no TLS skip left


def test_sidecars_and_agents_reach_the_iam_listener_with_oauthbearer():
    local = _example_main()["locals"][0]
    assert attr(local, "msk_bootstrap") == '${split(",",aws_msk_cluster.this.bootstrap_brokers_sasl_iam)}'
    assert attr(local, "kafka_port") == 9098
    assert attr(local, "upstream_security") == {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
                                          "aws_msk_iam_region": "${var.region}"}
    calls = {name: body for path, name, body in module_calls() if path.parent == EXAMPLE}
    for name in ("sidecar", "agents"):
        assert attr(calls[name], "upstream_security") == "${local.upstream_security}", name
        assert attr(calls[name], "bootstrap_servers") == "${local.msk_bootstrap}", name
    assert attr(calls["network"], "kafka_ports") == ["${local.kafka_port}"]
    ingress = resources(EXAMPLE)[("aws_vpc_security_group_ingress_rule", "msk_from_groups")]
    assert (attr(ingress, "from_port"), attr(ingress, "to_port")) == ("${local.kafka_port}", "${local.kafka_port}")
    assert attr(calls["iam"], "msk") == {"cluster_arn": "${aws_msk_cluster.this.arn}", "topics": "${var.kafka_topics}"}


def test_modules_pass_upstream_security_into_the_rendered_config():
    for module in ("sidecar", "agents"):
        text = (MODULES / module / "main.tf").read_text()
        assert "merge(var.upstream_security, { bootstrap_servers = var.bootstrap_servers })" in text, module


def test_msk_policy_scopes_cluster_actions_to_the_cluster_and_topic_actions_to_topic_arns():
    document = resources(MODULES / "iam", "data")[("aws_iam_policy_document", "msk_client")]
    statements = {attr(s, "sid"): s for s in blocks(document, "statement")}
    assert set(attr(statements["KafkaClusterConnect"], "actions")) == CLUSTER_ACTIONS
    assert set(attr(statements["KafkaTopicsDescribeWriteRead"], "actions")) == TOPIC_ACTIONS
    assert set(attr(statements["KafkaTransactionsAndGroups"], "actions")) == TXN_GROUP_ACTIONS
    assert attr(statements["KafkaTransactionsAndGroups"], "resources") == "${local.msk_transaction_and_group_arns}"
    main = parse(MODULES / "iam" / "main.tf")["locals"][0]
    # cluster/NAME/UUID -> topic/NAME/UUID/TOPIC: the topic ARNs MSK checks, one per named topic
    assert attr(main, "msk_topic_arns") == ('${var.msk == None ? [] : [for t in var.msk.topics : '
                                      '"${replace(var.msk.cluster_arn, ":cluster/", ":topic/")}/${t}"]}')
    iam = resources(MODULES / "iam")
    for attachment, role in (("proxy_msk", "${aws_iam_role.proxy.name}"), ("agent_msk", "${aws_iam_role.agent.name}")):
        assert attr(iam[("aws_iam_role_policy_attachment", attachment)], "role") == role


def test_every_upstream_request_has_its_iam_actions():
    sources = [path for package in ("proxy", "kafka_upstream", "kafka_protocol", "leader_notify/agent")
               for path in sorted((ROOT / package).glob("*.py"))]
    sent = set()
    for path in sources:
        for group in REQUEST_IMPORT.findall(path.read_text()):
            sent |= {name.strip() for name in group.replace("\n", " ").split(",") if name.strip().endswith("Request")}
    assert {"ProduceRequest", "MetadataRequest", "FetchRequest", "SaslAuthenticateRequest"} <= sent  # the scan works
    unmapped = sent - set(IAM_ACTIONS_BY_REQUEST)
    assert not unmapped, f"map these requests to MSK IAM actions: {unmapped}"
    needed = set().union(*(IAM_ACTIONS_BY_REQUEST[name] for name in sent))
    granted = CLUSTER_ACTIONS | TOPIC_ACTIONS | TXN_GROUP_ACTIONS
    assert needed <= granted, needed - granted
