variable "name_prefix" {
  description = "Prefix of every IAM role and policy name (e.g. azsidecar-prod)."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,40}$", var.name_prefix))
    error_message = "name_prefix must be 1..40 characters of IAM name characters [A-Za-z0-9+=,.@_-]."
  }
}

variable "bucket_arn" {
  description = "ARN of the WAL bucket (modules/wal-bucket output bucket_arn)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_arn))
    error_message = "bucket_arn must be an S3 bucket ARN (arn:aws:s3:::NAME)."
  }
}

variable "prefixes" {
  description = <<-EOT
    Key layout in the bucket, as wal_s3 writes it: WAL objects `<wal><hash4>/wal/...`, epoch
    markers `<wal><epoch_segment>/...` (wal.epoch_prefix), checkpoints
    `<wal><checkpoint_segment>/...` (wal.checkpoint_prefix), audit records `<audit>...`.
  EOT
  type = object({
    wal                = optional(string, "wal/")
    epoch_segment      = optional(string, "_epochs")
    checkpoint_segment = optional(string, "_checkpoints")
    audit              = optional(string, "audit/")
  })
  default = {}
  validation {
    condition     = alltrue([for p in [var.prefixes.wal, var.prefixes.audit] : can(regex("^[A-Za-z0-9_.-]+/$", p))]) && var.prefixes.wal != var.prefixes.audit
    error_message = "prefixes.wal and prefixes.audit must be distinct single path segments ending in '/'."
  }
  validation {
    condition     = alltrue([for p in [var.prefixes.epoch_segment, var.prefixes.checkpoint_segment] : can(regex("^_[A-Za-z0-9_.-]*$", p))])
    error_message = "epoch_segment and checkpoint_segment are single segments starting with '_' (never a hex digit, so WAL lifecycle rules skip them)."
  }
}

variable "directory_bucket_arns" {
  description = "ARNs of the S3 Express One Zone WAL directory buckets (modules/wal-directory-buckets output bucket_arns); empty with an S3 Standard WAL."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for a in var.directory_bucket_arns : can(regex("^arn:aws[a-z-]*:s3express:[a-z0-9-]+:[0-9]{12}:bucket/[a-z0-9-]+--[a-z0-9-]+--x-s3$", a))])
    error_message = "directory_bucket_arns must be S3 Express directory bucket ARNs (arn:aws:s3express:REGION:ACCOUNT:bucket/NAME--AZID--x-s3)."
  }
}

variable "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the WAL bucket (modules/wal-bucket output kms_key_arn)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN."
  }
}

variable "hmac_secret_arn" {
  description = <<-EOT
    ARN of the Secrets Manager secret or SSM SecureString parameter holding the notification
    HMAC keys (comma-separated, first one signs). ECS injects it as AZSIDECAR_NOTIFY_HMAC_KEYS
    with the execution role created here.
  EOT
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+|ssm:[a-z0-9-]+:[0-9]{12}:parameter/.+)$", var.hmac_secret_arn))
    error_message = "hmac_secret_arn must be a Secrets Manager secret ARN or an SSM parameter ARN."
  }
}

variable "hmac_secret_kms_key_arn" {
  description = "Customer KMS key that encrypts the HMAC secret; null when it uses the AWS managed key."
  type        = string
  default     = null
  validation {
    condition     = var.hmac_secret_kms_key_arn == null ? true : can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", var.hmac_secret_kms_key_arn))
    error_message = "hmac_secret_kms_key_arn must be null or a KMS key ARN."
  }
}

variable "proxy_trusted_services" {
  description = "AWS services that may assume the proxy role: ECS tasks (sidecar container) and/or EC2 (systemd sidecar)."
  type        = set(string)
  default     = ["ecs-tasks.amazonaws.com", "ec2.amazonaws.com"]
  validation {
    condition     = length(var.proxy_trusted_services) > 0 && alltrue([for s in var.proxy_trusted_services : contains(["ecs-tasks.amazonaws.com", "ec2.amazonaws.com"], s)])
    error_message = "proxy_trusted_services is a non-empty subset of ecs-tasks.amazonaws.com and ec2.amazonaws.com."
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

variable "msk" {
  description = <<-EOT
    MSK cluster with IAM access control that the sidecars and agents produce to: its ARN and
    the topics they may describe, write and read (names, or name prefixes ending in *). The
    policy allows kafka-cluster Connect, DescribeCluster and WriteDataIdempotently on the
    cluster and DescribeTopic, WriteData and ReadData on those topics only. null = no Kafka
    policy (clusters with SASL/SCRAM, mTLS or no client authentication).
  EOT
  type = object({
    cluster_arn = string
    topics      = list(string)
  })
  default = null
  validation {
    condition     = var.msk == null ? true : can(regex("^arn:aws[a-z-]*:kafka:[a-z0-9-]+:[0-9]{12}:cluster/[A-Za-z0-9-]+/[A-Za-z0-9-]+$", var.msk.cluster_arn))
    error_message = "msk.cluster_arn must be an MSK cluster ARN (arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID)."
  }
  validation {
    condition     = var.msk == null ? true : length(var.msk.topics) > 0 && alltrue([for t in var.msk.topics : can(regex("^[A-Za-z0-9._-]+\\*?$", t)) || t == "*"])
    error_message = "msk.topics: one or more Kafka topic names, or prefixes ending in * (\"*\" alone = every topic of the cluster)."
  }
}
