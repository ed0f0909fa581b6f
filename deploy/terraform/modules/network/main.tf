# Security groups. The agent port is open only to members of the proxies' group: a
# notification carries an HMAC, but nothing outside the sidecars should even reach it.
# The sidecar's Kafka listener is on loopback and needs no rule at all. Egress is limited
# to the brokers, the agents and HTTPS to AWS APIs (S3 through its gateway endpoint).

locals {
  # Rule sets keyed by a stable name, so adding one never replaces another.
  kafka_egress = {
    for pair in setproduct(sort(tolist(var.kafka_ports)), var.broker_cidrs) :
    "${pair[0]}-${pair[1]}" => { port = pair[0], cidr = pair[1] }
  }
  groups = {
    proxies = aws_security_group.proxies.id
    agents  = aws_security_group.agents.id
  }
  metrics_ingress = {
    for pair in setproduct(keys(local.groups), var.monitoring_cidrs) :
    "${pair[0]}-${pair[1]}" => { group = pair[0], cidr = pair[1] }
  }
  kafka_egress_by_group = {
    for pair in setproduct(keys(local.groups), keys(local.kafka_egress)) :
    "${pair[0]}-${pair[1]}" => merge(local.kafka_egress[pair[1]], { group = pair[0] })
  }
  https_prefix_lists = {
    for pair in setproduct(keys(local.groups), keys(var.aws_api_prefix_lists)) :
    "${pair[0]}-${pair[1]}" => { group = pair[0], prefix_list_id = var.aws_api_prefix_lists[pair[1]] }
  }
  https_cidr_egress = {
    for pair in setproduct(keys(local.groups), var.https_cidrs) :
    "${pair[0]}-${pair[1]}" => { group = pair[0], cidr = pair[1] }
  }
}

resource "aws_security_group" "proxies" {
  #checkov:skip=CKV2_AWS_5:attached outside this module (producer tasks, agents module); checkov cannot follow module outputs
  name        = "${var.name_prefix}-proxies"
  description = "azsidecar sidecars (attach to producer tasks or hosts)"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_security_group" "agents" {
  #checkov:skip=CKV2_AWS_5:attached outside this module (producer tasks, agents module); checkov cannot follow module outputs
  name        = "${var.name_prefix}-agents"
  description = "azsidecar agents (one ECS service per AZ)"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "agent_port_from_proxies" {
  security_group_id            = aws_security_group.agents.id
  description                  = "notifications from sidecars only"
  ip_protocol                  = "tcp"
  from_port                    = var.agent_port
  to_port                      = var.agent_port
  referenced_security_group_id = aws_security_group.proxies.id
  tags                         = var.tags
}

resource "aws_vpc_security_group_egress_rule" "proxies_to_agents" {
  security_group_id            = aws_security_group.proxies.id
  description                  = "notifications to the agents"
  ip_protocol                  = "tcp"
  from_port                    = var.agent_port
  to_port                      = var.agent_port
  referenced_security_group_id = aws_security_group.agents.id
  tags                         = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each          = local.metrics_ingress
  security_group_id = local.groups[each.value.group]
  description       = "Prometheus scrape from monitoring"
  ip_protocol       = "tcp"
  from_port         = var.metrics_port
  to_port           = var.metrics_port
  cidr_ipv4         = each.value.cidr
  tags              = var.tags
}

resource "aws_vpc_security_group_egress_rule" "kafka" {
  for_each          = local.kafka_egress_by_group
  security_group_id = local.groups[each.value.group]
  description       = "Kafka brokers"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
  tags              = var.tags
}

resource "aws_vpc_security_group_egress_rule" "https_prefix_lists" {
  for_each          = local.https_prefix_lists
  security_group_id = local.groups[each.value.group]
  description       = "HTTPS to AWS APIs (S3 gateway endpoint)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  prefix_list_id    = each.value.prefix_list_id
  tags              = var.tags
}

resource "aws_vpc_security_group_egress_rule" "https_cidrs" {
  for_each          = local.https_cidr_egress
  security_group_id = local.groups[each.value.group]
  description       = "HTTPS to interface VPC endpoints"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value.cidr
  tags              = var.tags
}
