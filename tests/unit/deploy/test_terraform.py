"""Structure of deploy/terraform, checked on the parsed HCL (no terraform binary here).

Each test reads the files as written and compares with expectations written by hand:
the IAM actions of every role, the lifecycle rules, the agent port's sources, the
validation ranges the issue asks for.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.deploy._hcl import (
    EXAMPLE,
    MODULES,
    TERRAFORM,
    all_blocks_of,
    attr,
    blocks,
    module_calls,
    parse,
    resources,
    tf_files,
    variables,
)

MODULE_NAMES = ("agents", "config", "gateway", "iam", "network", "sidecar", "wal-bucket", "wal-directory-buckets")
ALL_DIRS = [MODULES / m for m in MODULE_NAMES] + [EXAMPLE]


def test_every_tf_file_parses_and_modules_have_the_standard_layout():
    files = tf_files()
    assert len(files) >= 4 * len(MODULE_NAMES) + 4
    for path in files:
        parse(path)  # raises on a syntax error
    for name in MODULE_NAMES:
        present = {p.name for p in (MODULES / name).glob("*.tf")}
        assert present == {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}, name
    assert {p.name for p in EXAMPLE.glob("*.tf")} == {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}


@pytest.mark.parametrize("directory", ALL_DIRS, ids=lambda p: p.name)
def test_every_variable_is_typed_described_and_validated(directory):
    found = variables(directory)
    assert found, f"{directory} declares no variables"
    for name, body in found.items():
        type_expr = attr(body, "type")
        assert type_expr, f"{directory.name}: variable {name} has no type"
        assert not re.search(r"\bany\b", type_expr), f"{directory.name}: variable {name} uses any: {type_expr}"
        description = attr(body, "description", "")
        assert len(description.strip()) >= 10, f"{directory.name}: variable {name} has no real description"
        assert blocks(body, "validation"), f"{directory.name}: variable {name} has no validation block"
        for v in blocks(body, "validation"):
            assert attr(v, "condition") and attr(v, "error_message"), f"{directory.name}: {name}"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=lambda p: p.name)
def test_every_output_is_described(directory):
    for path in directory.glob("*.tf"):
        for entry in parse(path).get("output", []):
            for name, body in entry.items():
                assert len(attr(body, "description", "").strip()) >= 10, f"{directory.name}: output {name}"


def _conditions(directory, variable):
    return " ".join(attr(v, "condition") for v in blocks(variables(directory)[variable], "validation"))


def test_zone_count_is_validated_two_to_six_in_modules_and_two_to_three_for_msk():
    assert "length(var.zones) >= 2 && length(var.zones) <= 6" in _conditions(MODULES / "agents", "zones")
    assert "length(var.agent_endpoints) >= 2 && length(var.agent_endpoints) <= 6" in _conditions(
        MODULES / "sidecar", "agent_endpoints")
    assert "length(var.zones) >= 2 && length(var.zones) <= 3" in _conditions(EXAMPLE, "zones")


def test_cidr_variables_are_validated_and_refuse_the_whole_internet():
    for variable in ("monitoring_cidrs", "broker_cidrs"):
        cond = _conditions(MODULES / "network", variable)
        assert "cidrhost(c,0)" in cond.replace(" ", ""), variable
        assert "0.0.0.0/0" in cond and "::/0" in cond, variable
    assert "cidrhost(var.vpc_cidr,0)" in _conditions(EXAMPLE, "vpc_cidr").replace(" ", "")
    assert "cidrhost(z.subnet_cidr,0)" in _conditions(EXAMPLE, "zones").replace(" ", "")
    assert "0.0.0.0/0" in _conditions(EXAMPLE, "monitoring_cidrs")


def test_linger_and_size_ranges_match_wal_s3_config():
    # wal_s3/config.py: max_bytes 64 KiB..5 GiB, linger_ms 1..60000.
    config = _conditions(MODULES / "config", "settings").replace(" ", "")
    sidecar = _conditions(MODULES / "sidecar", "wal").replace(" ", "")
    for cond in (config, sidecar):
        assert "max_bytes>=65536" in cond and "max_bytes<=5368709120" in cond
        assert "linger_ms>=1" in cond and "linger_ms<=60000" in cond
        assert "max_buffered_bytes>=var." in cond
    example = _conditions(EXAMPLE, "wal").replace(" ", "")
    assert "max_bytes>=65536" in example and "linger_ms<=60000" in example


def test_lifecycle_expires_wal_objects_by_hex_digit_and_moves_audit_to_ia():
    body = resources(MODULES / "wal-bucket")[("aws_s3_bucket_lifecycle_configuration", "wal")]
    (dynamic,) = blocks(body, "dynamic")
    rule = dynamic["rule"]
    assert attr(rule, "for_each") == "${toset(local.hex_digits)}"
    (content,) = blocks(rule, "content")
    assert attr(content, "status") == "Enabled"
    assert attr(blocks(content, "filter")[0], "prefix") == "${var.wal_prefix}${rule.value}"
    assert attr(blocks(content, "expiration")[0], "days") == "${var.wal_expiration_days}"
    static = {attr(r, "id"): r for r in blocks(body, "rule")}
    audit = static["audit-infrequent-access"]
    assert attr(blocks(audit, "filter")[0], "prefix") == "${var.audit_prefix}"
    transition = blocks(audit, "transition")[0]
    assert attr(transition, "storage_class") == "STANDARD_IA"
    assert attr(transition, "days") == "${var.audit_ia_transition_days}"
    abort = static["abort-incomplete-multipart"]
    assert attr(blocks(abort, "abort_incomplete_multipart_upload")[0], "days_after_initiation") == 1
    # S3 refuses a STANDARD_IA transition before 30 days; lifecycle counts whole days.
    assert "var.audit_ia_transition_days>=30" in _conditions(MODULES / "wal-bucket", "audit_ia_transition_days").replace(" ", "")
    assert "var.wal_expiration_days>=1" in _conditions(MODULES / "wal-bucket", "wal_expiration_days").replace(" ", "")


def test_hex_digit_rules_match_wal_s3_key_layout():
    """The lifecycle rules must hit WAL objects and miss epoch markers and checkpoints."""
    from wal_s3.checkpoint_manifest import manifest_key
    from wal_s3.config import WalConfig
    from wal_s3.gc import checkpoint_key
    from wal_s3.writer import epoch_marker_prefix, object_key

    main = (MODULES / "wal-bucket" / "main.tf").read_text()
    digits = re.search(r"hex_digits\s*=\s*\[([^\]]*)\]", main).group(1)
    assert re.findall(r'"([^"]+)"', digits) == list("0123456789abcdef")
    rule_prefixes = [f"wal/{d}" for d in "0123456789abcdef"]
    config = WalConfig(bucket="b", prefix="wal/")
    for sequence in range(64):
        key = object_key("wal/", "use1-az1", "sidecar-ip-10-0-0-1", 3, sequence)
        assert any(key.startswith(p) for p in rule_prefixes), key
        ck = checkpoint_key(config, key, "use1-az2")
        assert not any(ck.startswith(p) for p in rule_prefixes), ck
    marker = epoch_marker_prefix(config, "sidecar-ip-10-0-0-1")
    assert not any(marker.startswith(p) for p in rule_prefixes), marker
    manifest = manifest_key(config.prefix, config.checkpoint_prefix, "use1-az2", 1790000000000, "0123456789abcdef")
    assert not any(manifest.startswith(p) for p in rule_prefixes), manifest


def test_bucket_blocks_public_access_requires_tls_and_uses_kms_with_bucket_key():
    r = resources(MODULES / "wal-bucket")
    pab = r[("aws_s3_bucket_public_access_block", "wal")]
    for flag in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
        assert attr(pab, flag) is True, flag
    sse_rule = blocks(r[("aws_s3_bucket_server_side_encryption_configuration", "wal")], "rule")[0]
    assert attr(blocks(sse_rule, "apply_server_side_encryption_by_default")[0], "sse_algorithm") == "aws:kms"
    assert attr(sse_rule, "bucket_key_enabled") is True
    policy = resources(MODULES / "wal-bucket", "data")[("aws_iam_policy_document", "bucket")]
    (deny,) = blocks(policy, "statement")
    assert attr(deny, "effect") == "Deny"
    cond = blocks(deny, "condition")[0]
    assert (attr(cond, "test"), attr(cond, "variable"), attr(cond, "values")) == ("Bool", "aws:SecureTransport", ["false"])
    assert r[("aws_kms_key", "wal")]["enable_key_rotation"] == [True]


def test_agent_port_is_open_only_to_the_proxies_group_and_no_ingress_is_open_to_the_world():
    rules = resources(MODULES / "network")
    agent_rule = rules[("aws_vpc_security_group_ingress_rule", "agent_port_from_proxies")]
    assert attr(agent_rule, "from_port") == "${var.agent_port}" == attr(agent_rule, "to_port")
    assert attr(agent_rule, "referenced_security_group_id") == "${aws_security_group.proxies.id}"
    assert "cidr_ipv4" not in agent_rule and "cidr_ipv6" not in agent_rule
    agent_port_rules = [
        name for (rtype, name), body in rules.items()
        if rtype == "aws_vpc_security_group_ingress_rule" and attr(body, "from_port") == "${var.agent_port}"
    ]
    assert agent_port_rules == ["agent_port_from_proxies"]
    for path, rtype, name, body in all_blocks_of("resource"):
        if rtype == "aws_vpc_security_group_ingress_rule":
            assert attr(body, "cidr_ipv4") not in ("0.0.0.0/0",), f"{path}: {name}"
            assert attr(body, "cidr_ipv6") not in ("::/0",), f"{path}: {name}"
        if rtype == "aws_security_group":
            assert not blocks(body, "ingress"), f"{path}: {name} uses inline ingress; use rule resources"


def _policy_actions(directory):
    """policy document name -> {sid: (sorted actions, resources)}."""
    out = {}
    for (rtype, name), body in resources(directory, "data").items():
        if rtype != "aws_iam_policy_document":
            continue
        statements = list(blocks(body, "statement"))
        for d in blocks(body, "dynamic"):
            statements.extend(blocks(d["statement"], "content"))
        out[name] = {}
        for s in statements:
            actions = attr(s, "actions")
            if isinstance(actions, str):  # a conditional expression: take every quoted action
                actions = re.findall(r"'([a-z0-9-]+:[A-Za-z*]+)'", actions)
            out[name][attr(s, "sid")] = (sorted(actions), attr(s, "resources"))
    return out


def test_iam_actions_are_exactly_the_intended_ones():
    wal = "${var.bucket_arn}/${var.prefixes.wal}*"
    expected = {
        "proxy": {
            "ListWalPrefix": (["s3:ListBucket"], ["${var.bucket_arn}"]),
            "WalObjectsWriteRead": (["s3:GetObject", "s3:PutObject"], ["${local.wal_objects}"]),
            "AuditRecordsWrite": (["s3:AbortMultipartUpload", "s3:PutObject"], ["${local.audit_objects}"]),
            "BucketKeyUse": (["kms:Decrypt", "kms:GenerateDataKey"], ["${var.kms_key_arn}"]),
            "ExpressSessions": (["s3express:CreateSession"], "${statement.value}"),
        },
        "agent": {
            "WalObjectsRead": (["s3:GetObject"], ["${local.wal_objects}"]),
            "CheckpointsWrite": (["s3:PutObject"], ["${local.checkpoint_objects}"]),
            "AuditRecordsWrite": (["s3:AbortMultipartUpload", "s3:PutObject"], ["${local.audit_objects}"]),
            "BucketKeyUse": (["kms:Decrypt", "kms:GenerateDataKey"], ["${var.kms_key_arn}"]),
            "ExpressSessions": (["s3express:CreateSession"], "${statement.value}"),
        },
        "gc": {
            "ListWalPrefix": (["s3:ListBucket"], ["${var.bucket_arn}"]),
            "WalObjectsReadDelete": (["s3:DeleteObject", "s3:GetObject"], ["${local.wal_objects}"]),
            "BucketKeyDecrypt": (["kms:Decrypt"], ["${var.kms_key_arn}"]),
            "ExpressSessions": (["s3express:CreateSession"], "${statement.value}"),
        },
        "audit_reader": {
            "ListAudit": (["s3:ListBucket"], ["${var.bucket_arn}"]),
            "AuditRecordsRead": (["s3:GetObject"], ["${local.audit_objects}"]),
            "BucketKeyDecrypt": (["kms:Decrypt"], ["${var.kms_key_arn}"]),
        },
        "hmac_secret": {
            "ReadNotifyHmacKeys": (["secretsmanager:GetSecretValue", "ssm:GetParameters"], ["${var.hmac_secret_arn}"]),
            "DecryptNotifyHmacKeys": (["kms:Decrypt"], ["${statement.value}"]),
        },
        "hmac_secret_host": {
            "ReadNotifyHmacKeysOnHost": (["secretsmanager:GetSecretValue", "ssm:GetParameter"], ["${var.hmac_secret_arn}"]),
            "DecryptNotifyHmacKeysOnHost": (["kms:Decrypt"], ["${statement.value}"]),
        },
        "msk_client": {
            "KafkaClusterConnect": (["kafka-cluster:Connect", "kafka-cluster:DescribeCluster",
                                     "kafka-cluster:WriteDataIdempotently"],
                                    "${var.msk == None ? [] : ['${var.msk.cluster_arn}']}"),
            "KafkaTopicsDescribeWriteRead": (["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData",
                                              "kafka-cluster:WriteData"], "${local.msk_topic_arns}"),
            "KafkaTransactionsAndGroups": (["kafka-cluster:AlterGroup", "kafka-cluster:AlterTransactionalId",
                                            "kafka-cluster:DescribeGroup", "kafka-cluster:DescribeTransactionalId"],
                                           "${local.msk_transaction_and_group_arns}"),
        },
        "assume_ecs_tasks": {None: (["sts:AssumeRole"], None)},
        "assume_proxy": {None: (["sts:AssumeRole"], None)},
    }
    assert _policy_actions(MODULES / "iam") == expected
    main = (MODULES / "iam" / "main.tf").read_text()
    assert f'wal_objects        = "{wal}"' in main
    assert 'checkpoint_objects = "${var.bucket_arn}/${var.prefixes.wal}${var.prefixes.checkpoint_segment}/*"' in main
    assert 'audit_objects      = "${var.bucket_arn}/${var.prefixes.audit}*"' in main


def test_list_bucket_is_always_narrowed_to_a_prefix():
    expected_prefixes = {
        ("proxy", "ListWalPrefix"): ["${var.prefixes.wal}*"],
        ("gc", "ListWalPrefix"): ["${var.prefixes.wal}*"],
        ("audit_reader", "ListAudit"): ["${var.prefixes.audit}*"],
    }
    seen = {}
    for (rtype, name), body in resources(MODULES / "iam", "data").items():
        for s in blocks(body, "statement"):
            if attr(s, "actions") == ["s3:ListBucket"]:
                (cond,) = blocks(s, "condition")
                assert (attr(cond, "test"), attr(cond, "variable")) == ("StringLike", "s3:prefix")
                seen[(name, attr(s, "sid"))] = attr(cond, "values")
    assert seen == expected_prefixes


def test_no_wildcard_actions_outside_key_policies():
    for path, rtype, name, body in all_blocks_of("data"):
        if rtype != "aws_iam_policy_document" or name in ("key", "example_key", "bucket"):
            continue  # key policies (kms:* on "this key") and the TLS deny (s3:* Deny)
        for s in blocks(body, "statement"):
            actions = attr(s, "actions")
            text = actions if isinstance(actions, str) else " ".join(actions)
            assert "*" not in text, f"{path}: {name} {actions}"


def test_no_count_anywhere_and_per_az_resources_iterate_over_zone_ids():
    for path, rtype, name, body in all_blocks_of("resource") + all_blocks_of("data"):
        assert "count" not in body, f"{path}: {rtype}.{name} uses count"
    for path, name, body in module_calls():
        assert "count" not in body, f"{path}: module {name} uses count"
    agents = resources(MODULES / "agents")
    assert attr(agents[("aws_ecs_task_definition", "agent")], "for_each") == "${var.zones}"
    # One service and one Cloud Map name per agent (several per zone), keyed "<zone>-a<i>".
    for key in [("aws_ecs_service", "agent"), ("aws_service_discovery_service", "agent")]:
        assert attr(agents[key], "for_each") == "${local.agents}", key
    agents_local = attr(parse(MODULES / "agents" / "main.tf")["locals"][0], "agents")
    assert 'for i in range(z.agents) : "${zone}-a${i}" => {\'zone\': \'${zone}\'' in agents_local, agents_local
    example = resources(EXAMPLE)
    for key in [("aws_subnet", "private"), ("aws_ecs_service", "producer"), ("aws_ecs_task_definition", "producer")]:
        assert attr(example[key], "for_each") == "${var.zones}", key
    assert attr(example[("aws_subnet", "private")], "availability_zone_id") == "${each.key}"
    sidecars = [body for path, name, body in module_calls() if name == "sidecar"]
    assert [attr(b, "for_each") for b in sidecars] == ["${var.zones}"]


def test_gc_task_serves_its_metrics_on_the_metrics_port():
    agents = MODULES / "agents"
    gc = resources(agents)[("aws_ecs_task_definition", "gc")]
    assert "'portMappings': [{'containerPort': '${var.metrics_port}', 'protocol': 'tcp', 'name': 'metrics'}]" \
        in attr(gc, "container_definitions")
    settings = str(resources(agents, "module")[("gc_config", "settings")]).replace(" ", "").replace("\\", "")
    assert "'gc_metrics_port':'${var.metrics_port}'" in settings
    assert "'gc_metrics_host':'0.0.0.0'" in settings


def test_agent_services_are_pinned_to_their_zone_subnets():
    service = resources(MODULES / "agents")[("aws_ecs_service", "agent")]
    net = blocks(service, "network_configuration")[0]
    assert attr(net, "subnets") == "${each.value.subnet_ids}"
    assert attr(net, "assign_public_ip") is False
    pre = blocks(blocks(service, "lifecycle")[0], "precondition")[0]
    assert "availability_zone_id == each.value.zone" in attr(pre, "condition")


def test_each_agent_runs_one_task_and_never_two_during_a_deployment():
    service = resources(MODULES / "agents")[("aws_ecs_service", "agent")]
    assert attr(service, "desired_count") == 1
    assert attr(service, "deployment_minimum_healthy_percent") == 0
    assert attr(service, "deployment_maximum_percent") == 100
    assert attr(service, "task_definition") == "${aws_ecs_task_definition.agent[each.value.zone].arn}"


def test_sidecars_get_every_agent_of_every_zone_no_load_balancer():
    outputs = {}
    for entry in parse(MODULES / "agents" / "outputs.tf")["output"]:
        outputs.update(entry)
    value = attr(outputs["agent_endpoints"], "value")
    assert "for i in range(z.agents)" in value and 'aws_service_discovery_service.agent["${zone}-a${i}"].name' in value
    sidecar_vars = {}
    for entry in parse(MODULES / "sidecar" / "variables.tf")["variable"]:
        sidecar_vars.update(entry)
    assert attr(sidecar_vars["agent_endpoints"], "type") == "${map(list(string))}"
    # no load balancer between proxies and agents; the zone gateways' own NLBs (modules/gateway)
    # sit between producers and gateways
    all_resources = [rtype for path, rtype, _name, _body in all_blocks_of("resource")
                     if MODULES / "gateway" not in path.parents]
    assert not [r for r in all_resources if r.startswith(("aws_lb", "aws_alb", "aws_elb"))]


def test_example_msk_has_one_broker_per_zone_and_routes_s3_through_the_gateway_endpoint():
    example = resources(EXAMPLE)
    msk = example[("aws_msk_cluster", "this")]
    assert attr(msk, "number_of_broker_nodes") == "${length(local.zone_ids)}"
    group = blocks(msk, "broker_node_group_info")[0]
    assert attr(group, "client_subnets") == "${local.subnet_ids}"
    s3 = example[("aws_vpc_endpoint", "s3")]
    assert attr(s3, "vpc_endpoint_type") == "Gateway"
    outputs = {}
    for entry in parse(EXAMPLE / "outputs.tf")["output"]:
        outputs.update(entry)
    assert attr(outputs["producer_bootstrap_servers"], "value") == "localhost:9092"
    assert attr(outputs["agent_endpoints"], "value") == "${module.agents.agent_endpoints}"


def test_module_sources_are_local_and_exist():
    for path, name, body in module_calls():
        source = attr(body, "source")
        assert source.startswith("../"), f"{path}: {name} -> {source}"
        assert (path.parent / source).resolve().is_dir(), f"{path}: {name} -> {source}"


def test_versions_pin_terraform_and_the_aws_provider():
    for name in MODULE_NAMES:
        tf = attr(parse(MODULES / name / "versions.tf")["terraform"][0], "required_version")
        assert tf == ">= 1.3.0", name  # optional() with defaults needs 1.3
    assert TERRAFORM.is_dir()


def test_directory_buckets_one_per_zone_id_named_as_s3_requires():
    module = MODULES / "wal-directory-buckets"
    found = resources(module)
    bucket = found[("aws_s3_directory_bucket", "wal")]
    assert attr(bucket, "for_each") == "${var.zone_ids}"
    assert attr(bucket, "bucket") == "${var.base_name}--${each.key}--x-s3"  # wal_s3.config.directory_bucket_name
    assert (attr(bucket, "type"), attr(bucket, "data_redundancy")) == ("Directory", "SingleAvailabilityZone")
    (location,) = blocks(bucket, "location")
    assert (attr(location, "name"), attr(location, "type")) == ("${each.key}", "AvailabilityZone")
    lifecycle = found[("aws_s3_bucket_lifecycle_configuration", "wal")]
    assert attr(lifecycle, "for_each") == "${aws_s3_directory_bucket.wal}"
    (dynamic,) = blocks(lifecycle, "dynamic")
    (content,) = blocks(dynamic["rule"], "content")
    (rule_filter,) = blocks(content, "filter")
    assert attr(rule_filter, "prefix") == "${var.wal_prefix}${rule.value}"  # WAL objects only, as modules/wal-bucket
    example = (EXAMPLE / "main.tf").read_text()
    assert re.search(r'source\s+= "../../modules/wal-directory-buckets"', example)
    assert "directory_bucket_arns" in example
