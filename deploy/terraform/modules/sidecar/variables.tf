variable "zone" {
  description = <<-EOT
    AZ id of the producers this sidecar serves (use1-az1). Required on Fargate, where there
    is no instance metadata; null lets the process resolve it at start-up on EC2.
  EOT
  type        = string
  default     = null
  validation {
    condition     = var.zone == null ? true : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", var.zone))
    error_message = "zone must be null or an AZ id such as use1-az1."
  }
}

variable "region" {
  description = "AWS region (wal.region, log delivery)."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "proxy_id_prefix" {
  description = "Start of proxy.proxy_id; the host name is appended at start so every sidecar has its own WAL writer id (two live writers with one id fence each other)."
  type        = string
  default     = "sidecar"
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,20}$", var.proxy_id_prefix))
    error_message = "proxy_id_prefix must be 1..20 characters of [A-Za-z0-9._-]."
  }
}

variable "listen_port" {
  description = "Loopback port producers use (bootstrap.servers=localhost:<listen_port>)."
  type        = number
  default     = 9092
  validation {
    condition     = var.listen_port >= 1024 && var.listen_port <= 65535 && floor(var.listen_port) == var.listen_port
    error_message = "listen_port must be within 1024..65535."
  }
}

variable "metrics_port" {
  description = "proxy.metrics_port; 0 disables /metrics. The proxy serves it on its listen host (loopback)."
  type        = number
  default     = 9464
  validation {
    condition     = var.metrics_port == 0 || (var.metrics_port >= 1024 && var.metrics_port <= 65535 && floor(var.metrics_port) == var.metrics_port)
    error_message = "metrics_port must be 0 or within 1024..65535."
  }
}

variable "metrics_host" {
  description = "proxy.metrics_host: address /metrics binds. 127.0.0.1 keeps it inside the task or host; 0.0.0.0 lets Prometheus scrape the task's ENI, which the proxies security group admits from monitoring_cidrs only. The Kafka listener stays on loopback either way."
  type        = string
  default     = "127.0.0.1"
  validation {
    condition     = contains(["127.0.0.1", "0.0.0.0", "::1", "::"], var.metrics_host) || can(regex("^([0-9]{1,3}\\.){3}[0-9]{1,3}$", var.metrics_host))
    error_message = "metrics_host must be an IP address such as 127.0.0.1 or 0.0.0.0."
  }
}

variable "bootstrap_servers" {
  description = "Upstream Kafka bootstrap host:port list (upstream.bootstrap_servers)."
  type        = list(string)
  validation {
    condition     = length(var.bootstrap_servers) > 0 && alltrue([for hp in var.bootstrap_servers : can(regex("^[^:\\s]+:[0-9]+$", hp))])
    error_message = "bootstrap_servers must be one or more host:port."
  }
}

variable "wal" {
  description = "[wal] settings: bucket (the base name with storage_class express), key prefix, storage class, flush size and linger (null: the class default, 250 ms standard, 20 ms express)."
  type = object({
    bucket             = string
    prefix             = optional(string, "wal/")
    storage_class      = optional(string, "standard")
    max_bytes          = optional(number, 8388608)
    linger_ms          = optional(number)
    max_buffered_bytes = optional(number, 67108864)
  })
  validation {
    condition     = length(var.wal.bucket) > 0 && can(regex("^[A-Za-z0-9_.-]+/$", var.wal.prefix))
    error_message = "wal.bucket must be set and wal.prefix one segment ending in '/'."
  }
  validation {
    # Below ~300 KB one PUT + GET costs more than the cross-AZ transfer it replaces (ARCHITECTURE.md section 1).
    condition     = var.wal.max_bytes >= 65536 && var.wal.max_bytes <= 5368709120 && floor(var.wal.max_bytes) == var.wal.max_bytes
    error_message = "wal.max_bytes must be a whole number within 64 KiB..5 GiB."
  }
  validation {
    condition     = contains(["standard", "express"], var.wal.storage_class) && (var.wal.linger_ms == null ? true : (var.wal.linger_ms >= 1 && var.wal.linger_ms <= 60000 && floor(var.wal.linger_ms) == var.wal.linger_ms))
    error_message = "wal.storage_class is standard or express; wal.linger_ms null or a whole number within 1..60000."
  }
  validation {
    condition     = var.wal.max_buffered_bytes >= var.wal.max_bytes
    error_message = "wal.max_buffered_bytes must be >= wal.max_bytes."
  }
}

variable "router" {
  description = "[router] settings: policy, leader-zone overrides (clusters without broker.rack), per-topic ack modes, prices."
  type = object({
    policy          = optional(string, "cost")
    fallback        = optional(string, "direct")
    broker_zones    = optional(map(string), {})
    partition_zones = optional(map(string), {})
    ack_modes       = optional(map(string), {})
    prices = optional(object({
      s3_put_per_1000          = optional(number, 0.005)
      s3_get_per_1000          = optional(number, 0.0004)
      cross_az_per_gb_each_way = optional(number, 0.01)
    }), {})
  })
  default = {}
  validation {
    condition     = contains(["cost", "wal", "direct"], var.router.policy) && contains(["direct", "fail"], var.router.fallback)
    error_message = "router.policy is cost, wal or direct; router.fallback is direct or fail."
  }
  validation {
    condition     = alltrue([for z in concat(values(var.router.broker_zones), values(var.router.partition_zones)) : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", z))])
    error_message = "router.broker_zones and router.partition_zones values must be AZ ids."
  }
}

variable "agent_endpoints" {
  description = "notify.agents: AZ id => host:port of each of that zone's agents, in order (modules/agents output agent_endpoints). The proxy spreads a zone's partitions over them itself: no load balancer in between."
  type        = map(list(string))
  validation {
    condition     = length(var.agent_endpoints) >= 2 && length(var.agent_endpoints) <= 6 && alltrue([for z, hps in var.agent_endpoints : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", z)) && length(hps) >= 1 && length(hps) <= 20 && length(distinct(hps)) == length(hps) && alltrue([for hp in hps : can(regex("^[^:\\s]+:[0-9]+$", hp))])])
    error_message = "agent_endpoints maps 2..6 AZ ids to 1..20 distinct host:port addresses each."
  }
}

variable "audit_output" {
  description = "audit.output: s3://bucket/prefix in production."
  type        = string
  validation {
    condition     = length(var.audit_output) > 0
    error_message = "audit_output must be set."
  }
}

variable "image" {
  description = "Container image with azsidecar installed, pinned by tag or digest (not :latest)."
  type        = string
  validation {
    condition     = length(var.image) > 0 && !endswith(var.image, ":latest") && can(regex("(:[A-Za-z0-9_.-]+|@sha256:[0-9a-f]{64})$", var.image))
    error_message = "image must carry an explicit tag other than latest, or a sha256 digest."
  }
}

variable "hmac_secret_arn" {
  description = "Secrets Manager secret or SSM parameter ARN with the comma-separated HMAC keys (AZSIDECAR_NOTIFY_HMAC_KEYS)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+|ssm:[a-z0-9-]+:[0-9]{12}:parameter/.+)$", var.hmac_secret_arn))
    error_message = "hmac_secret_arn must be a Secrets Manager secret ARN or an SSM parameter ARN."
  }
}

variable "container_resources" {
  description = "CPU units and memory (MiB) reserved for the sidecar container inside the producer task; memory must hold wal.max_buffered_bytes."
  type = object({
    cpu    = optional(number, 256)
    memory = optional(number, 256)
  })
  default = {}
  validation {
    condition     = var.container_resources.cpu >= 64 && var.container_resources.cpu <= 16384 && var.container_resources.memory >= 128 && var.container_resources.memory <= 122880
    error_message = "container_resources: cpu 64..16384 units, memory 128..122880 MiB."
  }
}

variable "log_group_name" {
  description = "CloudWatch log group for the sidecar container's logs."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9_/.#-]{1,512}$", var.log_group_name))
    error_message = "log_group_name must be a CloudWatch log group name."
  }
}

variable "log_level" {
  description = "log_level of the sidecar."
  type        = string
  default     = "INFO"
  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.log_level)
    error_message = "log_level is DEBUG, INFO, WARNING or ERROR."
  }
}

variable "upstream_security" {
  description = <<-EOT
    How the process reaches the brokers (the [upstream] keys of proxy/config.py). For MSK
    with IAM access control: { security_protocol = "SASL_SSL", sasl_mechanism = "OAUTHBEARER",
    aws_msk_iam_region = <region> } and the bootstrap_brokers_sasl_iam addresses (port 9098);
    the task role signs the tokens, so it needs the kafka-cluster actions (modules/iam msk).
  EOT
  type = object({
    security_protocol    = optional(string, "PLAINTEXT")
    tls_ca_file          = optional(string, "")
    tls_check_hostname   = optional(bool, true)
    sasl_mechanism       = optional(string, "")
    sasl_username        = optional(string, "")
    sasl_password_file   = optional(string, "")
    aws_msk_iam_region   = optional(string, "")
    aws_msk_iam_role_arn = optional(string, "")
  })
  default = {}
  validation {
    condition     = contains(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], var.upstream_security.security_protocol) && startswith(var.upstream_security.security_protocol, "SASL_") == (var.upstream_security.sasl_mechanism != "")
    error_message = "upstream_security.security_protocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; sasl_mechanism is set exactly when it is SASL_*."
  }
  validation {
    condition     = var.upstream_security.sasl_mechanism != "OAUTHBEARER" || (var.upstream_security.security_protocol == "SASL_SSL" && can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", var.upstream_security.aws_msk_iam_region)))
    error_message = "upstream_security: OAUTHBEARER (MSK IAM) needs security_protocol SASL_SSL and aws_msk_iam_region."
  }
}
