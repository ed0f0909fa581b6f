variable "base_name" {
  description = "wal.bucket: the base name of the directory buckets, <base_name>--<az-id>--x-s3 each."
  type        = string
  validation {
    # The whole name is at most 63 characters: base + "--" + an AZ id (up to 14, usw2-lax1-az1) + "--x-s3".
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", var.base_name)) && !can(regex("--", var.base_name)) && length(var.base_name) <= 41
    error_message = "base_name: lowercase letters, digits and single hyphens, at most 41 characters."
  }
}

variable "zone_ids" {
  description = "AZ ids (use1-az1, ...) of the zones with sidecars: one directory bucket each."
  type        = set(string)
  validation {
    condition     = length(var.zone_ids) >= 2 && alltrue([for z in var.zone_ids : can(regex("^[a-z0-9]+(-[a-z0-9]+)*-az[0-9]+$", z))])
    error_message = "zone_ids: at least two AZ ids such as use1-az1."
  }
}

variable "wal_prefix" {
  description = "Key prefix of WAL objects (wal.prefix); lifecycle expiry is scoped to it."
  type        = string
  default     = "wal/"
  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+/$", var.wal_prefix))
    error_message = "wal_prefix must be one path segment ending in '/', e.g. wal/."
  }
}

variable "wal_expiration_days" {
  description = "Days after which lifecycle deletes a WAL object: the backstop behind `azsidecar gc`."
  type        = number
  default     = 1
  validation {
    condition     = var.wal_expiration_days >= 1 && var.wal_expiration_days <= 30 && floor(var.wal_expiration_days) == var.wal_expiration_days
    error_message = "wal_expiration_days must be a whole number of days within 1..30."
  }
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete non-empty buckets (test accounts only)."
  type        = bool
  default     = false
  validation {
    condition     = var.force_destroy == true || var.force_destroy == false
    error_message = "force_destroy must be true or false."
  }
}
