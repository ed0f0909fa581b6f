# Zone gateways: per availability zone, an internal network load balancer in that zone only,
# a gateway ECS service behind it (the proxy as a shared service: TLS + SASL on the listener,
# proxy.workers processes per task) and a DNS name <zone id>.<dns_zone_name>.
#
# Why one NLB per zone and not one for the region: a producer's bytes must reach a gateway
# in its own zone (the transfer the gateway exists to avoid); an NLB spanning zones would
# hand a connection to any zone's address. With one NLB per zone, cross-zone load balancing
# off, and the gateways advertising that zone's name in Metadata answers, every connection
# of a producer stays in its zone. Producers bootstrap from their own zone's name.
#
# TLS is end to end: the NLB forwards TCP, the proxy terminates TLS and authenticates SASL
# (a listener other hosts can reach refuses to start without both, proxy/config.py).
# Draining: ECS sends SIGTERM; the proxy stops accepting, finishes in-flight requests within
# shutdown_grace_s; the target group's deregistration delay matches, then resets what is left
# (connection_termination), and idempotent producers resume on another instance.

locals {
  run_dir     = "/run/azsidecar"
  config_file = "${local.run_dir}/azsidecar.toml"
  tls_cert    = "${local.run_dir}/tls-cert.pem"
  tls_key     = "${local.run_dir}/tls-key.pem"
  sasl_users  = "${local.run_dir}/sasl-users.toml"
  # Owner-only files (the secrets policy refuses others), then exec so azsidecar is PID 1.
  write_files = join(" && ", [
    "umask 077 && mkdir -p ${local.run_dir}/tmp",
    "printf '%s' \"$AZSIDECAR_CONFIG_TOML\" > ${local.config_file}",
    "printf '%s' \"$GATEWAY_TLS_CERT\" > ${local.tls_cert}",
    "printf '%s' \"$GATEWAY_TLS_KEY\" > ${local.tls_key}",
    "printf '%s' \"$GATEWAY_SASL_USERS\" > ${local.sasl_users}",
  ])
  workers = floor(var.task_size.cpu / 1024)
  zone_subnets = merge([
    for zone, z in var.zones : { for i, id in z.subnet_ids : "${zone}/${i}" => { zone = zone, id = id } }
  ]...)
  zone_names = { for zone in keys(var.zones) : zone => "${zone}.${var.dns_zone_name}" }
}

data "aws_subnet" "gateway" {
  for_each = local.zone_subnets
  id       = each.value.id
}

module "config" {
  source   = "../config"
  for_each = var.zones
  settings = {
    zone      = each.key
    log_level = var.log_level
    proxy = {
      listen_host      = "0.0.0.0"
      listen_port      = var.listener_port
      proxy_id         = "gw-${each.key}"
      shutdown_grace_s = var.shutdown_grace_s
      metrics_port     = var.metrics_port
      metrics_host     = "0.0.0.0"
      advertised_host  = local.zone_names[each.key]
      advertised_port  = var.listener_port
      workers          = local.workers
      tls_cert_file    = local.tls_cert
      tls_key_file     = local.tls_key
      sasl_mechanisms  = var.sasl.mechanisms
      sasl_users_file  = local.sasl_users
    }
    upstream = { bootstrap_servers = var.bootstrap_servers }
    router   = { policy = var.router_policy }
    wal = {
      bucket    = var.wal.bucket
      prefix    = var.wal.prefix
      region    = var.region
      max_bytes = var.wal.max_bytes
      linger_ms = var.wal.linger_ms
    }
    notify = { agents = var.agent_endpoints }
    audit  = { output = var.audit_output }
  }
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs by default; pass log_kms_key_arn for a customer key (logs carry no payload or secrets)
  name              = "/azsidecar/${var.name_prefix}-gateway"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = var.tags
}

resource "aws_lb" "gateway" {
  #checkov:skip=CKV_AWS_152:cross-zone load balancing would send producers' bytes to other zones, the transfer a zone gateway exists to avoid
  #checkov:skip=CKV_AWS_91:connection access logs of an internal TCP load balancer add nothing to the proxy's audit records and metrics
  for_each                         = var.zones
  name                             = substr("${var.name_prefix}-gw-${each.key}", 0, 32)
  internal                         = true
  load_balancer_type               = "network"
  subnets                          = each.value.subnet_ids
  enable_cross_zone_load_balancing = false # a producer's connection stays in its zone
  enable_deletion_protection       = true
  tags                             = var.tags

  lifecycle {
    precondition {
      condition     = alltrue([for i, id in each.value.subnet_ids : data.aws_subnet.gateway["${each.key}/${i}"].availability_zone_id == each.key])
      error_message = "Every subnet of zone ${each.key} must be in that availability zone."
    }
  }
}

resource "aws_lb_target_group" "gateway" {
  for_each             = var.zones
  name                 = substr("${var.name_prefix}-gw-${each.key}", 0, 32)
  port                 = var.listener_port
  protocol             = "TCP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = var.shutdown_grace_s + 5
  # After the delay, reset what is left: the producer reconnects through the NLB to a live
  # instance and retries its in-flight batches there (idempotence keeps them once, in order).
  connection_termination = true

  health_check {
    # /readyz: a gateway that is draining, or lost its brokers, leaves the rotation.
    protocol            = "HTTP"
    port                = tostring(var.metrics_port)
    path                = "/readyz"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
  tags = var.tags
}

resource "aws_lb_listener" "gateway" {
  #checkov:skip=CKV_AWS_2:TCP pass-through: the gateway itself terminates TLS (proxy.tls_cert_file), so producer traffic is encrypted end to end
  #checkov:skip=CKV_AWS_103:TCP pass-through: TLS is negotiated with the gateway, not the load balancer
  for_each          = var.zones
  load_balancer_arn = aws_lb.gateway[each.key].arn
  port              = var.listener_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.gateway[each.key].arn
  }
  tags = var.tags
}

resource "aws_route53_record" "gateway" {
  for_each = var.zones
  zone_id  = var.dns_zone_id
  name     = local.zone_names[each.key]
  type     = "A"

  alias {
    name                   = aws_lb.gateway[each.key].dns_name
    zone_id                = aws_lb.gateway[each.key].zone_id
    evaluate_target_health = true
  }
}

resource "aws_ecs_task_definition" "gateway" {
  for_each                 = var.zones
  family                   = "${var.name_prefix}-gateway-${each.key}"
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
    name                   = "gateway"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    entryPoint             = ["/bin/sh", "-c"]
    # Unique per task: two live WAL writers with one id fence each other (workers add -w<i>).
    command = ["${local.write_files} && exec azsidecar proxy --config ${local.config_file} --proxy-id gw-${each.key}-$(hostname)"]
    environment = [
      { name = "TMPDIR", value = "${local.run_dir}/tmp" },
      { name = "AWS_REGION", value = var.region },
      { name = "AZSIDECAR_CONFIG_TOML", value = module.config[each.key].toml },
    ]
    secrets = [
      { name = "AZSIDECAR_NOTIFY_HMAC_KEYS", valueFrom = var.hmac_secret_arn },
      { name = "GATEWAY_TLS_CERT", valueFrom = var.tls.cert_secret_arn },
      { name = "GATEWAY_TLS_KEY", valueFrom = var.tls.key_secret_arn },
      { name = "GATEWAY_SASL_USERS", valueFrom = var.sasl.users_secret_arn },
    ]
    portMappings = [
      { containerPort = var.listener_port, protocol = "tcp", name = "kafka" },
      { containerPort = var.metrics_port, protocol = "tcp", name = "status" },
    ]
    mountPoints = [{ sourceVolume = "azsidecar-run", containerPath = local.run_dir, readOnly = false }]
    ulimits     = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    healthCheck = {
      command = [
        "CMD", "python3", "-c",
        "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:${var.metrics_port}/livez', timeout=2).status != 200)"
      ]
      interval    = 10
      timeout     = 3
      retries     = 3
      startPeriod = 30
    }
    stopTimeout = var.shutdown_grace_s + 15 # the drain, then the WAL's last PUT and notifications
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.this.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "gateway-${each.key}"
      }
    }
  }])
  tags = var.tags
}

resource "aws_ecs_service" "gateway" {
  for_each                           = var.zones
  name                               = "${var.name_prefix}-gateway-${each.key}"
  cluster                            = var.ecs_cluster_arn
  task_definition                    = aws_ecs_task_definition.gateway[each.key].arn
  desired_count                      = each.value.desired_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  propagate_tags                     = "SERVICE"
  health_check_grace_period_seconds  = 30

  network_configuration {
    subnets          = each.value.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.gateway[each.key].arn
    container_name   = "gateway"
    container_port   = var.listener_port
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  depends_on = [aws_lb_listener.gateway]
  tags       = var.tags
}
