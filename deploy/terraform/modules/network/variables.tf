variable "name_prefix" {
  description = "Prefix of the security group names."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,40}$", var.name_prefix))
    error_message = "name_prefix must be 1..40 characters of [A-Za-z0-9._-]."
  }
}

variable "vpc_id" {
  description = "VPC of the producers, agents and brokers."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "agent_port" {
  description = "TCP port the agents listen on for notifications (agent.listen_port)."
  type        = number
  default     = 9400
  validation {
    condition     = var.agent_port >= 1024 && var.agent_port <= 65535 && floor(var.agent_port) == var.agent_port
    error_message = "agent_port must be an unprivileged port (1024..65535)."
  }
}

variable "metrics_port" {
  description = "TCP port of the Prometheus /metrics endpoint of sidecars and agents (proxy.metrics_port)."
  type        = number
  default     = 9464
  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535 && floor(var.metrics_port) == var.metrics_port
    error_message = "metrics_port must be an unprivileged port (1024..65535)."
  }
}

variable "monitoring_cidrs" {
  description = "CIDR blocks of the Prometheus scrapers allowed to reach the metrics port. Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.monitoring_cidrs) > 0 && alltrue([for c in var.monitoring_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0"], c)])
    error_message = "monitoring_cidrs must be one or more valid CIDR blocks, none of them 0.0.0.0/0 or ::/0."
  }
}

variable "broker_cidrs" {
  description = "CIDR blocks of the Kafka brokers (sidecars and agents connect to them)."
  type        = list(string)
  validation {
    condition     = length(var.broker_cidrs) > 0 && alltrue([for c in var.broker_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0"], c)])
    error_message = "broker_cidrs must be one or more valid CIDR blocks, none of them 0.0.0.0/0 or ::/0."
  }
}

variable "kafka_ports" {
  description = "Broker listener ports (MSK: 9092 plaintext, 9094 TLS, 9096 SASL/SCRAM, 9098 IAM)."
  type        = set(number)
  default     = [9092]
  validation {
    condition     = length(var.kafka_ports) > 0 && alltrue([for p in var.kafka_ports : p >= 1 && p <= 65535 && floor(p) == p])
    error_message = "kafka_ports must be one or more TCP ports."
  }
}

variable "aws_api_prefix_lists" {
  description = <<-EOT
    Managed prefix lists for HTTPS to AWS APIs, by a name of your choice ({ s3 = <the S3
    gateway endpoint's prefix_list_id> } at least); egress 443 is allowed only to them and
    to https_cidrs. Keyed by name because the ids are unknown until the endpoints exist.
  EOT
  type        = map(string)
  validation {
    condition     = length(var.aws_api_prefix_lists) > 0 && alltrue([for n in keys(var.aws_api_prefix_lists) : can(regex("^[a-z0-9_-]{1,32}$", n))])
    error_message = "aws_api_prefix_lists needs at least one entry; names are 1..32 of [a-z0-9_-]."
  }
}

variable "https_cidrs" {
  description = "CIDR blocks reached over HTTPS besides the prefix lists (interface VPC endpoints: ECR, logs, Secrets Manager)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.https_cidrs : can(cidrhost(c, 0))])
    error_message = "https_cidrs must be valid CIDR blocks."
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
