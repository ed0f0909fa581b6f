# The sidecar next to a producer. This module creates no resources: it renders
# - the azsidecar TOML file (modules/config) from the variables,
# - the ECS container definition to add to the producer's task definition,
# - a systemd unit for producers on EC2 hosts.
# Producers keep their code and set bootstrap.servers=localhost:<listen_port>.

locals {
  run_dir        = "/run/azsidecar"
  config_file    = "${local.run_dir}/azsidecar.toml"
  volume_name    = "azsidecar-run"
  hmac_in_ssm    = can(regex("^arn:aws[a-z-]*:ssm:", var.hmac_secret_arn))
  metrics_on_eni = var.metrics_port != 0 && !contains(["127.0.0.1", "::1"], var.metrics_host)
  # SSM parameter name from its ARN (arn:...:parameter/NAME -> /NAME).
  hmac_ssm_name = try("/${trimprefix(split(":parameter/", var.hmac_secret_arn)[1], "/")}", null)

  settings = {
    zone       = var.zone
    log_format = "json"
    log_level  = var.log_level
    proxy = {
      listen_host  = "127.0.0.1"
      listen_port  = var.listen_port
      proxy_id     = var.proxy_id_prefix
      metrics_port = var.metrics_port
      metrics_host = var.metrics_host
    }
    upstream = merge(var.upstream_security, { bootstrap_servers = var.bootstrap_servers })
    router   = var.router
    wal = {
      bucket             = var.wal.bucket
      prefix             = var.wal.prefix
      storage_class      = var.wal.storage_class
      region             = var.region
      max_bytes          = var.wal.max_bytes
      linger_ms          = var.wal.linger_ms
      max_buffered_bytes = var.wal.max_buffered_bytes
    }
    notify = { agents = var.agent_endpoints }
    audit  = { output = var.audit_output }
  }

  # proxy_id must be unique per live sidecar: the prefix plus the host name (the task's
  # ENI host name on Fargate). exec makes azsidecar PID 1 so it receives SIGTERM and drains.
  command = join(" && ", [
    "umask 077",
    "mkdir -p ${local.run_dir}/tmp",
    "printf '%s' \"$AZSIDECAR_CONFIG_TOML\" > ${local.config_file}",
    "exec azsidecar proxy --config ${local.config_file} --proxy-id \"${var.proxy_id_prefix}-$(hostname)\"",
  ])

  container_definition = {
    name                   = "azsidecar"
    image                  = var.image
    essential              = true
    cpu                    = var.container_resources.cpu
    memoryReservation      = var.container_resources.memory
    readonlyRootFilesystem = true
    entryPoint             = ["/bin/sh", "-c"]
    command                = [local.command]
    # TMPDIR: the root filesystem is read-only and the audit writer stages files before upload.
    environment = [
      { name = "AZSIDECAR_CONFIG_TOML", value = module.config.toml },
      { name = "TMPDIR", value = "${local.run_dir}/tmp" },
      { name = "AWS_REGION", value = var.region },
    ]
    secrets     = [{ name = "AZSIDECAR_NOTIFY_HMAC_KEYS", valueFrom = var.hmac_secret_arn }]
    mountPoints = [{ sourceVolume = local.volume_name, containerPath = local.run_dir, readOnly = false }]
    # The Kafka listener has no port mapping: it is on loopback, shared with the producer
    # container through the task's network namespace (awsvpc), and must not be reachable
    # from outside. /metrics gets one only when it binds beyond loopback.
    portMappings = local.metrics_on_eni ? [{ containerPort = var.metrics_port, protocol = "tcp", name = "metrics" }] : []
    # /livez on the status port when it is on (the event loop turns), else the listener accepts.
    healthCheck = {
      command = var.metrics_port != 0 ? [
        "CMD", "python3", "-c",
        "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:${var.metrics_port}/livez', timeout=2).status != 200)"
      ] : ["CMD", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', ${var.listen_port}), 2).close()"]
      interval    = 10
      timeout     = 3
      retries     = 3
      startPeriod = 10
    }
    # Longer than proxy.shutdown_grace_s (10 s): in-flight produce requests drain first.
    stopTimeout = 20
    ulimits     = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = var.log_group_name
        awslogs-region        = var.region
        awslogs-stream-prefix = "azsidecar"
      }
    }
  }

  systemd_unit = templatefile("${path.module}/azsidecar-proxy.service.tftpl", {
    config_file     = "/etc/azsidecar/azsidecar.toml"
    proxy_id_prefix = var.proxy_id_prefix
    hmac_fetch = (local.hmac_in_ssm
      ? "aws ssm get-parameter --region ${var.region} --name ${local.hmac_ssm_name} --with-decryption --query Parameter.Value --output text"
    : "aws secretsmanager get-secret-value --region ${var.region} --secret-id ${var.hmac_secret_arn} --query SecretString --output text")
  })
}

module "config" {
  source   = "../config"
  settings = local.settings
}
