variable "region" {
  description = "AWS region of the deployment."
  type        = string
  default     = "us-east-1"
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "name" {
  description = "Name prefix of every resource (lower case, used in DNS and bucket names)."
  type        = string
  default     = "azsidecar-demo"
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,22}$", var.name))
    error_message = "name must be 1..23 lower-case letters, digits or '-'."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC."
  type        = string
  default     = "10.40.0.0/16"
  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 24
    error_message = "vpc_cidr must be a valid IPv4 CIDR block of /24 or larger."
  }
}

variable "zones" {
  description = <<-EOT
    Private subnet per availability zone, keyed by AZ id (ids are the same physical zone in
    every account; MSK reports them as broker.rack). One MSK broker per zone.
  EOT
  type = map(object({
    subnet_cidr = string
  }))
  default = {
    "use1-az1" = { subnet_cidr = "10.40.0.0/20" }
    "use1-az2" = { subnet_cidr = "10.40.16.0/20" }
    "use1-az4" = { subnet_cidr = "10.40.32.0/20" }
  }
  validation {
    # MSK places brokers in 2 or 3 client subnets; the modules themselves accept 2..6 zones.
    condition     = length(var.zones) >= 2 && length(var.zones) <= 3
    error_message = "zones must have 2 or 3 entries (MSK supports 2 or 3 client subnets)."
  }
  validation {
    condition     = alltrue([for id in keys(var.zones) : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", id))])
    error_message = "zones keys must be AZ ids such as use1-az1."
  }
  validation {
    condition     = alltrue([for z in values(var.zones) : can(cidrhost(z.subnet_cidr, 0))])
    error_message = "every subnet_cidr must be a valid CIDR block."
  }
}

variable "monitoring_cidrs" {
  description = "CIDR blocks of the Prometheus scrapers (metrics port of agents and sidecars)."
  type        = list(string)
  default     = ["10.40.0.0/16"]
  validation {
    condition     = length(var.monitoring_cidrs) > 0 && alltrue([for c in var.monitoring_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "monitoring_cidrs must be valid CIDR blocks other than 0.0.0.0/0."
  }
}

variable "image" {
  description = "azsidecar container image (pinned tag or digest), e.g. in your ECR."
  type        = string
  validation {
    condition     = length(var.image) > 0 && !endswith(var.image, ":latest") && can(regex("(:[A-Za-z0-9_.-]+|@sha256:[0-9a-f]{64})$", var.image))
    error_message = "image must carry an explicit tag other than latest, or a sha256 digest."
  }
}

variable "producer_image" {
  description = "Image of your producer application; it reads KAFKA_BOOTSTRAP_SERVERS (localhost:9092)."
  type        = string
  validation {
    condition     = length(var.producer_image) > 0 && !endswith(var.producer_image, ":latest") && can(regex("(:[A-Za-z0-9_.-]+|@sha256:[0-9a-f]{64})$", var.producer_image))
    error_message = "producer_image must carry an explicit tag other than latest, or a sha256 digest."
  }
}

variable "producers_per_zone" {
  description = "Producer tasks (each with its sidecar) per zone."
  type        = number
  default     = 1
  validation {
    condition     = var.producers_per_zone >= 0 && var.producers_per_zone <= 100 && floor(var.producers_per_zone) == var.producers_per_zone
    error_message = "producers_per_zone must be a whole number within 0..100."
  }
}

variable "msk" {
  description = "MSK cluster shape."
  type = object({
    kafka_version  = optional(string, "3.6.0")
    instance_type  = optional(string, "kafka.m7g.large")
    volume_size_gb = optional(number, 1000)
  })
  default = {}
  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+", var.msk.kafka_version)) && startswith(var.msk.instance_type, "kafka.") && var.msk.volume_size_gb >= 1 && var.msk.volume_size_gb <= 16384
    error_message = "msk.kafka_version like 3.6.0, msk.instance_type kafka.*, msk.volume_size_gb 1..16384."
  }
}

variable "wal" {
  description = "WAL store and flush settings of the sidecars (storage_class express: a directory bucket per zone, linger 20 ms unless set), and the days after which the lifecycle rule expires WAL objects (the GC backstop)."
  type = object({
    storage_class   = optional(string, "standard")
    max_bytes       = optional(number, 8388608)
    linger_ms       = optional(number)
    expiration_days = optional(number, 1)
  })
  default = {}
  validation {
    condition     = var.wal.max_bytes >= 65536 && var.wal.max_bytes <= 5368709120 && (var.wal.linger_ms == null ? true : (var.wal.linger_ms >= 1 && var.wal.linger_ms <= 60000))
    error_message = "wal.max_bytes within 64 KiB..5 GiB, wal.linger_ms null (the storage class's default) or within 1..60000."
  }
  validation {
    condition     = contains(["standard", "express"], var.wal.storage_class)
    error_message = "wal.storage_class is standard (one S3 Standard bucket) or express (an S3 Express One Zone directory bucket per zone)."
  }
  validation {
    condition     = var.wal.expiration_days >= 1 && var.wal.expiration_days <= 30 && floor(var.wal.expiration_days) == var.wal.expiration_days
    error_message = "wal.expiration_days must be a whole number of days within 1..30."
  }
}

variable "ack_modes" {
  description = <<-EOT
    router.ack_modes (topic glob => leader or wal) of the sidecars, also given to GC. With
    "wal" a producer is answered once its batch is durable in S3; an object a lost sidecar
    left unapplied is then the only copy and the bucket's lifecycle rule is the one thing that
    deletes it: raise wal.expiration_days to the time you may need to run `azsidecar recover`.
  EOT
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for m in values(var.ack_modes) : contains(["leader", "wal"], m)])
    error_message = "ack_modes values are leader or wal."
  }
}

variable "agents_per_zone" {
  description = "Agents in each zone, each with its own address; the sidecars spread the zone's partitions over them (append capacity grows with them)."
  type        = number
  default     = 2
  validation {
    condition     = var.agents_per_zone >= 1 && var.agents_per_zone <= 20 && floor(var.agents_per_zone) == var.agents_per_zone
    error_message = "agents_per_zone must be a whole number within 1..20."
  }
}

variable "kafka_topics" {
  description = <<-EOT
    Topics the producers write through the sidecars (names, or prefixes ending in *): the
    sidecar and agent roles may describe, write and read these topics of the cluster only.
  EOT
  type        = list(string)
  validation {
    condition     = length(var.kafka_topics) > 0 && alltrue([for t in var.kafka_topics : can(regex("^[A-Za-z0-9._-]+\\*?$", t))])
    error_message = "kafka_topics: one or more topic names or prefixes ending in * (not * alone)."
  }
}
