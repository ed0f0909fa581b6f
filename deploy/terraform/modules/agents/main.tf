# Agents: `agents` ECS (Fargate) services of one task each per availability zone, pinned to
# that zone's subnets, each registered in Cloud Map as <zone id>-a<i>.<namespace>; plus one
# gc service for the region. The sidecars get every zone's list of agent names
# (output agent_endpoints) and spread the zone's partitions over them themselves
# (notify.agent_ownership: by leader broker, or rendezvous hashing of each partition): each
# agent owns its partitions, so each needs its own stable
# address and no load balancer sits in between (one behind a shared name could receive
# any partition and break its order).
#
# One task per service, and a deployment stops the old task before it starts the new one
# (minimum healthy 0 %, maximum 100 %): two tasks never serve one agent's partitions at
# once. Meanwhile the sidecars' breaker sends that agent's partitions to router.fallback
# after they drain, and back once the new task answers.
#
# Why ECS services and not EC2 Auto Scaling groups (docs/deploy.md, "Agents"):
# - the sidecars need a stable address per agent; ECS registers the task in Cloud Map
#   (DNS A record) with no load balancer in the path, where an ASG would need
#   an NLB per agent or a lifecycle hook to publish instance addresses;
# - the per-zone pinning is just the service's subnet list; rolling deployments with a
#   circuit breaker and task IAM roles come with it;
# - the agent is I/O bound and small; no host to patch.
#
# The TOML configuration travels in an environment variable and is written to a task-local
# volume at start, because the root filesystem is read-only.

locals {
  run_dir     = "/run/azsidecar"
  config_file = "${local.run_dir}/azsidecar.toml"
  # sh writes the rendered file, then exec's so azsidecar is PID 1 and receives SIGTERM.
  write_config = "umask 077 && mkdir -p ${local.run_dir}/tmp && printf '%s' \"$AZSIDECAR_CONFIG_TOML\" > ${local.config_file}"
  # The root filesystem is read-only: temporary files (audit files staged before their
  # upload to S3) go to the task volume.
  environment = [
    { name = "TMPDIR", value = "${local.run_dir}/tmp" },
    { name = "AWS_REGION", value = var.region },
  ]
  # Keyed by "<zone>/<index>": subnet ids may be unknown at plan time (created alongside),
  # and for_each keys must be known.
  zone_subnets = merge([
    for zone, z in var.zones : { for i, id in z.subnet_ids : "${zone}/${i}" => { zone = zone, id = id } }
  ]...)
  all_subnets = flatten([for zone in sort(keys(var.zones)) : var.zones[zone].subnet_ids])
  # One entry per agent: "<zone id>-a<i>" (its service and Cloud Map name). Keys stay put
  # when a zone gains an agent, so adding one never replaces the others.
  agents = merge([
    for zone, z in var.zones : { for i in range(z.agents) : "${zone}-a${i}" => { zone = zone, subnet_ids = z.subnet_ids } }
  ]...)

  common_settings = {
    log_format = "json"
    log_level  = var.log_level
    upstream   = merge(var.upstream_security, { bootstrap_servers = var.bootstrap_servers })
    wal = {
      bucket        = var.wal.bucket
      prefix        = var.wal.prefix
      storage_class = var.wal.storage_class
      region        = var.region
      cache_bytes   = var.wal.cache_bytes
    }
    audit = { output = var.audit_output }
  }
}

data "aws_subnet" "agent" {
  for_each = local.zone_subnets
  id       = each.value.id
}

module "config" {
  source   = "../config"
  for_each = var.zones
  settings = merge(local.common_settings, {
    zone = each.key
    # The agent serves notifications (and /metrics) on the task's ENI.
    agent = {
      listen_host  = "0.0.0.0"
      listen_port  = var.agent_port
      metrics_port = var.metrics_port
    }
  })
}

module "gc_config" {
  source = "../config"
  # GC keeps unapplied objects holding acknowledged (ack_mode wal) entries: it must see the
  # sidecars' ack_modes. The agents themselves do not use them. Its /metrics (objects
  # deleted, orphans) listens on the task's ENI like the agents'.
  settings = merge(local.common_settings, {
    router = { ack_modes = var.ack_modes }
    wal    = merge(local.common_settings.wal, { gc_metrics_port = var.metrics_port, gc_metrics_host = "0.0.0.0" })
  })
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs by default; pass log_kms_key_arn for a customer key (logs carry no payload or secrets)
  name              = "/azsidecar/${var.name_prefix}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = var.tags
}

resource "aws_service_discovery_private_dns_namespace" "agents" {
  name        = var.namespace_name
  description = "azsidecar agent endpoints, one name per agent: <AZ id>-a<i>"
  vpc         = var.vpc_id
  tags        = var.tags
}

resource "aws_service_discovery_service" "agent" {
  for_each = local.agents
  name     = each.key
  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.agents.id
    routing_policy = "MULTIVALUE"
    dns_records {
      # Short TTL: a replaced task's address must leave the sidecars' resolvers quickly.
      ttl  = 10
      type = "A"
    }
  }
  tags = var.tags
}

resource "aws_ecs_task_definition" "agent" {
  for_each                 = var.zones
  family                   = "${var.name_prefix}-agent-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = tostring(var.task_size.cpu)
  memory                   = tostring(var.task_size.memory)
  task_role_arn            = var.task_role_arn
  execution_role_arn       = var.execution_role_arn

  volume {
    name = "azsidecar-run"
  }

  container_definitions = jsonencode([{
    name                   = "agent"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    entryPoint             = ["/bin/sh", "-c"]
    command                = ["${local.write_config} && exec azsidecar agent --config ${local.config_file} --zone ${each.key}"]
    environment            = concat(local.environment, [{ name = "AZSIDECAR_CONFIG_TOML", value = module.config[each.key].toml }])
    secrets                = [{ name = "AZSIDECAR_NOTIFY_HMAC_KEYS", valueFrom = var.hmac_secret_arn }]
    portMappings = [
      { containerPort = var.agent_port, protocol = "tcp", name = "notify" },
      { containerPort = var.metrics_port, protocol = "tcp", name = "metrics" },
    ]
    mountPoints = [{ sourceVolume = "azsidecar-run", containerPath = local.run_dir, readOnly = false }]
    ulimits     = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    # /livez: ECS replaces an agent whose event loop is wedged. Not /readyz: a broker outage
    # would otherwise restart every agent of the zone while they could not help anyway.
    healthCheck = {
      command = [
        "CMD", "python3", "-c",
        "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:${var.metrics_port}/livez', timeout=2).status != 200)"
      ]
      interval    = 10
      timeout     = 3
      retries     = 3
      startPeriod = 20
    }
    # Matches the proxy's shutdown grace: in-flight appends finish before SIGKILL.
    stopTimeout = 30
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.this.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "agent-${each.key}"
      }
    }
  }])
  tags = var.tags
}

resource "aws_ecs_service" "agent" {
  for_each        = local.agents
  name            = "${var.name_prefix}-agent-${each.key}"
  cluster         = var.ecs_cluster_arn
  task_definition = aws_ecs_task_definition.agent[each.value.zone].arn
  # One task: the agent owns its partitions, and a second task behind the same name would
  # receive some of them too and break their order. Deployments stop, then start.
  desired_count                      = 1
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = each.value.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }

  service_registries {
    registry_arn = aws_service_discovery_service.agent[each.key].arn
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    precondition {
      condition     = alltrue([for i, id in each.value.subnet_ids : data.aws_subnet.agent["${each.value.zone}/${i}"].availability_zone_id == each.value.zone])
      error_message = "Every subnet of zone ${each.value.zone} must be in that availability zone."
    }
  }
  tags = var.tags
}

# GC talks only to S3 (free from any zone), so one task anywhere in the region is enough.
resource "aws_ecs_task_definition" "gc" {
  family                   = "${var.name_prefix}-gc"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = "256"
  memory                   = "512"
  task_role_arn            = var.gc_role_arn
  execution_role_arn       = var.execution_role_arn

  volume {
    name = "azsidecar-run"
  }

  container_definitions = jsonencode([{
    name                   = "gc"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    entryPoint             = ["/bin/sh", "-c"]
    command                = ["${local.write_config} && exec azsidecar gc --config ${local.config_file}"]
    environment            = concat(local.environment, [{ name = "AZSIDECAR_CONFIG_TOML", value = module.gc_config.toml }])
    portMappings           = [{ containerPort = var.metrics_port, protocol = "tcp", name = "metrics" }]
    mountPoints            = [{ sourceVolume = "azsidecar-run", containerPath = local.run_dir, readOnly = false }]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.this.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "gc"
      }
    }
  }])
  tags = var.tags
}

resource "aws_ecs_service" "gc" {
  name                               = "${var.name_prefix}-gc"
  cluster                            = var.ecs_cluster_arn
  task_definition                    = aws_ecs_task_definition.gc.arn
  desired_count                      = 1
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = local.all_subnets
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }
  tags = var.tags
}
