variable "bucket_name" {
  description = "Name of the WAL bucket (one per region; every sidecar, agent and the GC job use it)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !can(regex("\\.\\.", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name: 3..63 lower-case letters, digits, '.' or '-'."
  }
}

variable "wal_prefix" {
  description = "Key prefix of WAL objects (wal.prefix in the sidecar config); lifecycle expiry and IAM grants are scoped to it."
  type        = string
  default     = "wal/"
  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+/$", var.wal_prefix))
    error_message = "wal_prefix must be one path segment ending in '/', e.g. wal/."
  }
}

variable "audit_prefix" {
  description = "Key prefix of audit records (audit.output = s3://<bucket>/<audit_prefix>)."
  type        = string
  default     = "audit/"
  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+/$", var.audit_prefix))
    error_message = "audit_prefix must be one path segment ending in '/', e.g. audit/."
  }
  validation {
    # Lifecycle rules select WAL objects by "<wal_prefix><hex digit>"; a distinct first
    # segment keeps audit records out of them.
    condition     = var.audit_prefix != var.wal_prefix
    error_message = "audit_prefix must differ from wal_prefix."
  }
}

variable "wal_expiration_days" {
  description = <<-EOT
    Days after which lifecycle deletes a WAL object: the backstop behind `azsidecar gc`, which
    deletes an object as soon as every zone applied its share. S3 lifecycle counts whole days
    (there is no hour granularity), so 1 is the shortest backstop. Epoch markers and
    checkpoints (`<wal_prefix>_epochs/`, `<wal_prefix>_checkpoints/`) are never expired.
  EOT
  type        = number
  default     = 1
  validation {
    condition     = var.wal_expiration_days >= 1 && var.wal_expiration_days <= 30 && floor(var.wal_expiration_days) == var.wal_expiration_days
    error_message = "wal_expiration_days must be a whole number of days within 1..30."
  }
}

variable "audit_ia_transition_days" {
  description = "Days after which audit records move to STANDARD_IA (S3 requires at least 30)."
  type        = number
  default     = 30
  validation {
    condition     = var.audit_ia_transition_days >= 30 && var.audit_ia_transition_days <= 3650 && floor(var.audit_ia_transition_days) == var.audit_ia_transition_days
    error_message = "audit_ia_transition_days must be a whole number within 30..3650."
  }
}

variable "audit_expiration_days" {
  description = "Days after which audit records are deleted; null keeps them."
  type        = number
  default     = null
  validation {
    condition     = var.audit_expiration_days == null ? true : (var.audit_expiration_days >= 31 && floor(var.audit_expiration_days) == var.audit_expiration_days)
    error_message = "audit_expiration_days must be null or a whole number > 30 (after the STANDARD_IA transition)."
  }
}

variable "kms_key_arn" {
  description = "ARN of a customer-managed KMS key for SSE-KMS; null creates a dedicated key with yearly rotation."
  type        = string
  default     = null
  validation {
    condition     = var.kms_key_arn == null ? true : can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", var.kms_key_arn))
    error_message = "kms_key_arn must be null or a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket (test accounts only)."
  type        = bool
  default     = false
  validation {
    condition     = var.force_destroy == true || var.force_destroy == false
    error_message = "force_destroy must be true or false."
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
