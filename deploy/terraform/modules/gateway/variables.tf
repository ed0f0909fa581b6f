variable "name_prefix" {
  description = "Prefix of the ECS services, task families, log group and Cloud Map names."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,30}$", var.name_prefix))
    error_message = "name_prefix must be 1..31 lower-case letters, digits or '-' (it becomes part of DNS names)."
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

variable "vpc_id" {
  description = "VPC of the gateways and their load balancers."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "ecs_cluster_arn" {
  description = "ECS cluster that runs the gateway services."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecs:[a-z0-9-]+:[0-9]{12}:cluster/.+$", var.ecs_cluster_arn))
    error_message = "ecs_cluster_arn must be an ECS cluster ARN."
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

variable "execution_role_arn" {
  description = "ECS execution role (modules/iam output execution_role_arn): image pull, logs, HMAC secret."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$", var.execution_role_arn))
    error_message = "execution_role_arn must be an IAM role ARN."
  }
}

variable "hmac_secret_arn" {
  description = "Secrets Manager secret or SSM parameter with the comma-separated HMAC keys, injected as AZSIDECAR_NOTIFY_HMAC_KEYS."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+|ssm:[a-z0-9-]+:[0-9]{12}:parameter/.+)$", var.hmac_secret_arn))
    error_message = "hmac_secret_arn must be a Secrets Manager secret ARN or an SSM parameter ARN."
  }
}

variable "bootstrap_servers" {
  description = "Kafka bootstrap host:port list of the cluster the gateways front (upstream.bootstrap_servers)."
  type        = list(string)
  validation {
    condition     = length(var.bootstrap_servers) > 0 && alltrue([for hp in var.bootstrap_servers : can(regex("^[^:\\s]+:[0-9]+$", hp))])
    error_message = "bootstrap_servers must be one or more host:port."
  }
}

variable "audit_output" {
  description = "audit.output of the gateways: s3://bucket/prefix in production."
  type        = string
  validation {
    condition     = length(var.audit_output) > 0
    error_message = "audit_output must be set."
  }
}

variable "log_retention_days" {
  description = "CloudWatch Logs retention of the gateway logs."
  type        = number
  default     = 365
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, ... 365, ... 3653)."
  }
}

variable "log_kms_key_arn" {
  description = "KMS key for the log group; null uses CloudWatch Logs' own encryption."
  type        = string
  default     = null
  validation {
    condition     = var.log_kms_key_arn == null ? true : can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", var.log_kms_key_arn))
    error_message = "log_kms_key_arn must be null or a KMS key ARN."
  }
}

variable "log_level" {
  description = "log_level of the gateways."
  type        = string
  default     = "INFO"
  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.log_level)
    error_message = "log_level is DEBUG, INFO, WARNING or ERROR."
  }
}

variable "tags" {
  description = "Tags for every resource of the module."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for k in keys(var.tags) : length(k) <= 128])
    error_message = "Tag keys are at most 128 characters."
  }
}

variable "zones" {
  description = <<-EOT
    One entry per availability zone, keyed by AZ id (use1-az1). Each zone gets its own
    internal network load balancer in subnet_ids (all in that zone, checked at plan time)
    and its own gateway service behind it: producers in the zone connect to
    <zone id>.<dns_zone_name> and never leave the zone. workers = proxy.workers per task
    (one per vCPU of task_size).
  EOT
  type = map(object({
    subnet_ids    = list(string)
    desired_count = optional(number, 2)
  }))
  validation {
    condition     = length(var.zones) >= 1 && length(var.zones) <= 6
    error_message = "zones must have 1 to 6 entries (a region has at most 6 AZs)."
  }
  validation {
    condition     = alltrue([for id in keys(var.zones) : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", id))])
    error_message = "zones keys must be AZ ids such as use1-az1 (not AZ names such as us-east-1a)."
  }
  validation {
    condition     = alltrue([for z in values(var.zones) : length(z.subnet_ids) > 0 && alltrue([for s in z.subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])])
    error_message = "every zone needs at least one subnet id (subnet-...)."
  }
  validation {
    condition     = alltrue([for z in values(var.zones) : z.desired_count >= 2 && z.desired_count <= 50 && floor(z.desired_count) == z.desired_count])
    error_message = "desired_count must be a whole number within 2..50 (at least two instances per zone: one can drain while the other serves)."
  }
}

variable "task_size" {
  description = "Fargate CPU units and memory (MiB) of one gateway task; proxy.workers = cpu / 1024 (one process per vCPU)."
  type = object({
    cpu    = optional(number, 2048)
    memory = optional(number, 4096)
  })
  default = {}
  validation {
    condition     = contains([1024, 2048, 4096, 8192, 16384], var.task_size.cpu) && var.task_size.memory >= 2048 * var.task_size.cpu / 1024
    error_message = "task_size.cpu must be 1024..16384 (whole vCPUs, one worker each) with at least 2 GiB of memory per vCPU."
  }
}

variable "task_role_arn" {
  description = "Task role of the gateways: the sidecar's permissions (modules/iam output proxy_role_arn)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$", var.task_role_arn))
    error_message = "task_role_arn must be an IAM role ARN."
  }
}

variable "security_group_ids" {
  description = "Security groups of the gateway tasks: the Kafka port open to the producers' CIDRs only, egress to brokers, agents and S3."
  type        = list(string)
  validation {
    condition     = length(var.security_group_ids) > 0 && alltrue([for g in var.security_group_ids : can(regex("^sg-[0-9a-f]{8,17}$", g))])
    error_message = "security_group_ids must be one or more sg- ids."
  }
}

variable "tls" {
  description = "The listener's certificate chain and private key (PEM), as Secrets Manager secrets written to owner-only files at start (proxy.tls_cert_file, proxy.tls_key_file). The certificate must name every <zone id>.<dns_zone_name>."
  type = object({
    cert_secret_arn = string
    key_secret_arn  = string
  })
  validation {
    condition     = alltrue([for a in [var.tls.cert_secret_arn, var.tls.key_secret_arn] : can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", a))])
    error_message = "tls.cert_secret_arn and tls.key_secret_arn must be Secrets Manager secret ARNs."
  }
}

variable "sasl" {
  description = "SASL on the listener: the mechanisms producers may use and the users file (`azsidecar proxy-user` entries) as a Secrets Manager secret (proxy.sasl_users_file)."
  type = object({
    mechanisms       = optional(list(string), ["SCRAM-SHA-512"])
    users_secret_arn = string
  })
  validation {
    condition     = length(var.sasl.mechanisms) > 0 && alltrue([for m in var.sasl.mechanisms : contains(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], m)]) && can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.sasl.users_secret_arn))
    error_message = "sasl.mechanisms must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; sasl.users_secret_arn a Secrets Manager secret ARN."
  }
}

variable "wal" {
  description = "WAL settings of the gateways ([wal] section): bucket, prefix, flush size and linger."
  type = object({
    bucket    = string
    prefix    = optional(string, "wal/")
    max_bytes = optional(number, 8388608)
    linger_ms = optional(number, 250)
  })
  validation {
    condition     = length(var.wal.bucket) > 0 && can(regex("^[A-Za-z0-9_.-]+/$", var.wal.prefix))
    error_message = "wal.bucket must be set and wal.prefix one segment ending in '/'."
  }
  validation {
    condition     = var.wal.max_bytes >= 65536 && var.wal.max_bytes <= 5368709120 && var.wal.linger_ms >= 1 && var.wal.linger_ms <= 60000
    error_message = "wal.max_bytes must be within 64 KiB..5 GiB and wal.linger_ms within 1..60000 (wal_s3/config.py)."
  }
}

variable "agent_endpoints" {
  description = "notify.agents of the gateways: AZ id => host:port of each of that zone's agents, in order (modules/agents output agent_endpoints)."
  type        = map(list(string))
  validation {
    condition     = length(var.agent_endpoints) >= 2 && length(var.agent_endpoints) <= 6 && alltrue([for z, hps in var.agent_endpoints : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", z)) && length(hps) >= 1 && length(hps) <= 20 && length(distinct(hps)) == length(hps) && alltrue([for hp in hps : can(regex("^[^:\\s]+:[0-9]+$", hp))])])
    error_message = "agent_endpoints maps 2..6 AZ ids to 1..20 distinct host:port addresses each."
  }
}

variable "router_policy" {
  description = "router.policy of the gateways: cost (WAL where it pays), wal or direct."
  type        = string
  default     = "cost"
  validation {
    condition     = contains(["cost", "wal", "direct"], var.router_policy)
    error_message = "router_policy is cost, wal or direct."
  }
}

variable "listener_port" {
  description = "Kafka port of the load balancers and the gateways (proxy.listen_port, proxy.advertised_port)."
  type        = number
  default     = 9094
  validation {
    condition     = var.listener_port >= 1024 && var.listener_port <= 65535 && floor(var.listener_port) == var.listener_port
    error_message = "listener_port must be within 1024..65535."
  }
}

variable "metrics_port" {
  description = "Status port of worker 0 (/metrics, /livez, /readyz); worker i serves on metrics_port + i."
  type        = number
  default     = 9464
  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65000 && floor(var.metrics_port) == var.metrics_port
    error_message = "metrics_port must be within 1024..65000 (workers take the ports above it)."
  }
}

variable "dns_zone_id" {
  description = "Route 53 private hosted zone of the VPC in which each zone's gateway name is created."
  type        = string
  validation {
    condition     = can(regex("^Z[A-Z0-9]{1,31}$", var.dns_zone_id))
    error_message = "dns_zone_id must be a Route 53 hosted zone id (Z...)."
  }
}

variable "dns_zone_name" {
  description = "Name of that hosted zone: producers in zone use1-az1 bootstrap from use1-az1.<dns_zone_name>:<listener_port>."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$", var.dns_zone_name))
    error_message = "dns_zone_name must be a DNS name with at least two labels."
  }
}

variable "shutdown_grace_s" {
  description = "proxy.shutdown_grace_s: how long a draining gateway finishes in-flight requests; the load balancer's deregistration delay and ECS stopTimeout follow it."
  type        = number
  default     = 20
  validation {
    condition     = var.shutdown_grace_s >= 1 && var.shutdown_grace_s <= 90
    error_message = "shutdown_grace_s must be within 1..90 (ECS stops a task at most 120 s after SIGTERM)."
  }
}
