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
  description = "VPC of the agents; the private DNS namespace for agent endpoints is created in it."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "ecs_cluster_arn" {
  description = "ECS cluster that runs the agent services."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecs:[a-z0-9-]+:[0-9]{12}:cluster/.+$", var.ecs_cluster_arn))
    error_message = "ecs_cluster_arn must be an ECS cluster ARN."
  }
}

variable "zones" {
  description = <<-EOT
    One entry per availability zone, keyed by AZ id (use1-az1; ids name the same physical zone
    in every account, names do not). Each zone gets `agents` agents, each its own one-task
    service with its own Cloud Map name (<zone id>-a<i>), pinned to subnet_ids, which must
    all be in that zone (checked at plan time). The proxies spread the zone's partitions over
    them (notify.agent_ownership: each leader broker's partitions to one agent by default, or
    rendezvous hashing per partition; docs/routing.md). With one broker per zone and the
    default, a zone's second agent stands by.
  EOT
  type = map(object({
    subnet_ids = list(string)
    agents     = optional(number, 2)
  }))
  validation {
    condition     = length(var.zones) >= 2 && length(var.zones) <= 6
    error_message = "zones must have 2 to 6 entries (a region has at most 6 AZs; one zone needs no agents)."
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
    condition     = alltrue([for z in values(var.zones) : z.agents >= 1 && z.agents <= 20 && floor(z.agents) == z.agents])
    error_message = "agents must be a whole number within 1..20."
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

variable "task_size" {
  description = "Fargate CPU units and memory (MiB) of one agent task; the WAL block cache (wal.cache_bytes) must fit in memory."
  type = object({
    cpu    = optional(number, 1024)
    memory = optional(number, 2048)
  })
  default = {}
  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.task_size.cpu) && var.task_size.memory >= 2 * var.task_size.cpu && var.task_size.memory <= 8 * var.task_size.cpu
    error_message = "task_size.cpu is a Fargate size (256..16384) and memory is 2x..8x cpu MiB."
  }
}

variable "task_role_arn" {
  description = "Task role of the agents (modules/iam output agent_role_arn)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$", var.task_role_arn))
    error_message = "task_role_arn must be an IAM role ARN."
  }
}

variable "gc_role_arn" {
  description = "Task role of the gc service (modules/iam output gc_role_arn)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$", var.gc_role_arn))
    error_message = "gc_role_arn must be an IAM role ARN."
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

variable "security_group_ids" {
  description = "Security groups of the agent tasks (modules/network output agents_security_group_id)."
  type        = list(string)
  validation {
    condition     = length(var.security_group_ids) > 0 && alltrue([for g in var.security_group_ids : can(regex("^sg-[0-9a-f]{8,17}$", g))])
    error_message = "security_group_ids must be one or more sg- ids."
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
  description = "Kafka bootstrap host:port list the agents append to (upstream.bootstrap_servers)."
  type        = list(string)
  validation {
    condition     = length(var.bootstrap_servers) > 0 && alltrue([for hp in var.bootstrap_servers : can(regex("^[^:\\s]+:[0-9]+$", hp))])
    error_message = "bootstrap_servers must be one or more host:port."
  }
}

variable "wal" {
  description = "WAL bucket settings shared with the sidecars ([wal] section)."
  type = object({
    bucket        = string
    prefix        = optional(string, "wal/")
    storage_class = optional(string, "standard")
    cache_bytes   = optional(number, 268435456)
  })
  validation {
    condition     = length(var.wal.bucket) > 0 && can(regex("^[A-Za-z0-9_.-]+/$", var.wal.prefix)) && var.wal.cache_bytes >= 0 && contains(["standard", "express"], var.wal.storage_class)
    error_message = "wal.bucket must be set, wal.prefix one segment ending in '/', wal.cache_bytes >= 0, wal.storage_class standard or express."
  }
}

variable "audit_output" {
  description = "audit.output of the agents: s3://bucket/prefix in production."
  type        = string
  validation {
    condition     = length(var.audit_output) > 0
    error_message = "audit_output must be set."
  }
}

variable "ack_modes" {
  description = <<-EOT
    router.ack_modes of the sidecars (topic glob => leader or wal), given to the gc task. An
    object holding an entry of an ack_mode wal topic that a zone has not applied is the only
    copy of records whose producer was already answered: GC must know these topics to keep
    such an object (wal_s3/gc.py) instead of deleting it as an old orphan.
  EOT
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for m in values(var.ack_modes) : contains(["leader", "wal"], m)])
    error_message = "ack_modes values are leader or wal."
  }
}

variable "agent_port" {
  description = "Notification port (agent.listen_port)."
  type        = number
  default     = 9400
  validation {
    condition     = var.agent_port >= 1024 && var.agent_port <= 65535 && floor(var.agent_port) == var.agent_port
    error_message = "agent_port must be within 1024..65535."
  }
}

variable "metrics_port" {
  description = "Prometheus port of the agents (agent.metrics_port)."
  type        = number
  default     = 9464
  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535 && floor(var.metrics_port) == var.metrics_port
    error_message = "metrics_port must be within 1024..65535."
  }
}

variable "namespace_name" {
  description = "Private DNS namespace of the agent endpoints: <zone id>.<namespace_name>."
  type        = string
  default     = "azsidecar.internal"
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$", var.namespace_name))
    error_message = "namespace_name must be a DNS name with at least two labels."
  }
}

variable "log_retention_days" {
  description = "CloudWatch Logs retention of agent and gc logs."
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
  description = "log_level of the agents and gc."
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
