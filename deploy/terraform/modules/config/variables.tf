variable "settings" {
  description = <<-EOT
    The azsidecar TOML configuration as an object. Attribute names are exactly the keys of
    azsidecar/config.py and the section dataclasses (proxy/config.py, router/config.py,
    wal_s3/config.py, leader_notify/config.py, spark_audit/config.py). Secrets (notify HMAC
    keys) are never part of it: they reach the process as AZSIDECAR_NOTIFY_HMAC_KEYS.
  EOT
  type = object({
    zone       = optional(string) # AZ id (use1-az1); null = resolved by the process at start-up
    log_format = optional(string, "json")
    log_level  = optional(string, "INFO")
    proxy = optional(object({
      listen_host                  = optional(string, "127.0.0.1")
      listen_port                  = optional(number, 9092)
      proxy_id                     = optional(string, "proxy-1")
      max_in_flight_per_connection = optional(number, 32)
      shutdown_grace_s             = optional(number, 10)
      metrics_port                 = optional(number, 0)
      metrics_host                 = optional(string, "127.0.0.1")
      # zone gateways (modules/gateway): advertised address, worker processes, TLS and SASL files
      advertised_host = optional(string, "")
      advertised_port = optional(number, 0)
      workers         = optional(number, 1)
      tls_cert_file   = optional(string, "")
      tls_key_file    = optional(string, "")
      sasl_mechanisms = optional(list(string), [])
      sasl_users_file = optional(string, "")
    }), {})
    upstream = object({
      bootstrap_servers  = list(string)
      client_id          = optional(string, "azsidecar")
      metadata_ttl_s     = optional(number, 30)
      request_timeout_s  = optional(number, 30)
      connect_timeout_s  = optional(number, 5)
      security_protocol  = optional(string, "PLAINTEXT") # MSK: SASL_SSL with IAM (port 9098), SSL (9094)
      tls_ca_file        = optional(string, "")          # "" = the image's system CAs (MSK's certificates are public)
      tls_check_hostname = optional(bool, true)
      sasl_mechanism     = optional(string, "") # OAUTHBEARER = MSK IAM; PLAIN or SCRAM-SHA-* with a user
      sasl_username      = optional(string, "")
      sasl_password_file = optional(string, "") # a mounted secret file; else AZSIDECAR_UPSTREAM_SASL_PASSWORD
      aws_msk_iam_region = optional(string, "") # with OAUTHBEARER: the cluster's region
      # with OAUTHBEARER: a role to assume for the tokens; "" = the task or instance role
      aws_msk_iam_role_arn = optional(string, "")
    })
    router = optional(object({
      policy          = optional(string, "cost")
      fallback        = optional(string, "direct")
      broker_zones    = optional(map(string), {})
      partition_zones = optional(map(string), {})
      ack_modes       = optional(map(string), {})
      prices = optional(object({
        s3_put_per_1000          = optional(number, 0.005)
        s3_get_per_1000          = optional(number, 0.0004)
        cross_az_per_gb_each_way = optional(number, 0.01)
        express_put_per_1000     = optional(number, 0.00113)
        express_get_per_1000     = optional(number, 0.00003)
        express_upload_per_gb    = optional(number, 0.0032)
        express_retrieval_per_gb = optional(number, 0.0006)
      }), {})
    }), {})
    wal = object({
      bucket                 = string
      prefix                 = optional(string, "wal/")
      region                 = string
      storage_class          = optional(string, "standard")
      max_bytes              = optional(number, 8388608)
      linger_ms              = optional(number)
      max_request_cost_share = optional(number, 0.05)
      max_buffered_bytes     = optional(number, 67108864)
      max_in_flight_puts     = optional(number, 4)
      max_attempts           = optional(number, 6)
      cache_bytes            = optional(number, 268435456)
      checkpoint_prefix      = optional(string, "_checkpoints")
      epoch_prefix           = optional(string, "_epochs")
      gc_interval_s          = optional(number, 300)
      gc_metrics_port        = optional(number, 0)
      gc_metrics_host        = optional(string, "127.0.0.1")
    })
    notify = optional(object({
      # AZ id => the zone's agents, host:port each (partitions are spread over them by owner).
      agents = optional(map(list(string)), {})
      # "leader": each broker's partitions to one agent of its zone; "partition": hashed per partition
      agent_ownership        = optional(string, "leader")
      timeout_s              = optional(number, 10)
      max_in_flight_per_zone = optional(number, 64)
      max_attempts           = optional(number, 3)
    }), {})
    agent = optional(object({
      listen_host            = optional(string, "127.0.0.1")
      listen_port            = optional(number, 9400)
      max_concurrent_reads   = optional(number, 8)
      max_in_flight_appends  = optional(number, 1024)
      max_request_bytes      = optional(number, 1048576)
      metrics_port           = optional(number, 0)
      checkpoint_interval_ms = optional(number, 1000)
      checkpoint_max_keys    = optional(number, 1000)
    }), {})
    audit = optional(object({
      enabled      = optional(bool, true)
      output       = optional(string, "audit-out")
      max_queue    = optional(number, 100000)
      roll_seconds = optional(number, 300)
      roll_bytes   = optional(number, 67108864)
    }), {})
  })

  validation {
    condition     = var.settings.zone == null || can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", var.settings.zone))
    error_message = "settings.zone must be an AZ id such as use1-az1 (not an AZ name such as us-east-1a)."
  }
  validation {
    condition     = contains(["text", "json"], var.settings.log_format) && contains(["DEBUG", "INFO", "WARNING", "ERROR"], upper(var.settings.log_level))
    error_message = "settings.log_format is text or json; settings.log_level is DEBUG, INFO, WARNING or ERROR."
  }
  validation {
    condition = alltrue([
      for p in [var.settings.proxy.listen_port, var.settings.proxy.metrics_port, var.settings.agent.listen_port, var.settings.agent.metrics_port, var.settings.wal.gc_metrics_port] :
      p >= 0 && p <= 65535 && floor(p) == p
    ])
    error_message = "proxy.listen_port, proxy.metrics_port, agent.listen_port, agent.metrics_port and wal.gc_metrics_port must be ports (0..65535)."
  }
  validation {
    condition     = contains(["leader", "partition"], var.settings.notify.agent_ownership)
    error_message = "notify.agent_ownership is leader or partition."
  }
  validation {
    condition     = var.settings.agent.checkpoint_interval_ms >= 1 && var.settings.agent.checkpoint_interval_ms <= 600000 && var.settings.agent.checkpoint_max_keys >= 1 && var.settings.agent.checkpoint_max_keys <= 10000
    error_message = "agent.checkpoint_interval_ms: 1..600000; agent.checkpoint_max_keys: 1..10000."
  }
  validation {
    condition     = length(var.settings.upstream.bootstrap_servers) > 0 && alltrue([for hp in var.settings.upstream.bootstrap_servers : can(regex("^[^:\\s]+:[0-9]+$", hp))])
    error_message = "upstream.bootstrap_servers: at least one host:port."
  }
  validation {
    condition = (
      contains(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], var.settings.upstream.security_protocol)
      && startswith(var.settings.upstream.security_protocol, "SASL_") == (var.settings.upstream.sasl_mechanism != "")
      && contains(["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], var.settings.upstream.sasl_mechanism)
    )
    error_message = "upstream.security_protocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; upstream.sasl_mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER) is required with SASL_* and not allowed otherwise."
  }
  validation {
    # Same rules as proxy/config.py: MSK IAM tokens are bearer secrets, so TLS only; the IAM role is the identity.
    condition = (var.settings.upstream.sasl_mechanism == "OAUTHBEARER" ? (
      var.settings.upstream.security_protocol == "SASL_SSL"
      && can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", var.settings.upstream.aws_msk_iam_region))
      && (var.settings.upstream.aws_msk_iam_role_arn == "" || startswith(var.settings.upstream.aws_msk_iam_role_arn, "arn:aws"))
      && var.settings.upstream.sasl_username == "" && var.settings.upstream.sasl_password_file == ""
      ) : (
      var.settings.upstream.aws_msk_iam_region == "" && var.settings.upstream.aws_msk_iam_role_arn == ""
      && (var.settings.upstream.sasl_mechanism == "" || var.settings.upstream.sasl_username != "")
    ))
    error_message = "upstream: OAUTHBEARER (MSK IAM) needs security_protocol SASL_SSL and aws_msk_iam_region (e.g. us-east-1), and takes no sasl_username or sasl_password_file; aws_msk_iam_* only with OAUTHBEARER; PLAIN and SCRAM need sasl_username."
  }
  validation {
    condition     = contains(["cost", "wal", "direct"], var.settings.router.policy) && contains(["direct", "fail"], var.settings.router.fallback)
    error_message = "router.policy is cost, wal or direct; router.fallback is direct or fail."
  }
  validation {
    condition     = alltrue([for m in values(var.settings.router.ack_modes) : contains(["leader", "wal"], m)])
    error_message = "router.ack_modes values are leader or wal."
  }
  validation {
    condition = alltrue([
      var.settings.router.prices.s3_put_per_1000 >= 0,
      var.settings.router.prices.s3_get_per_1000 >= 0,
      var.settings.router.prices.cross_az_per_gb_each_way >= 0,
      var.settings.router.prices.express_put_per_1000 >= 0,
      var.settings.router.prices.express_get_per_1000 >= 0,
      var.settings.router.prices.express_upload_per_gb >= 0,
      var.settings.router.prices.express_retrieval_per_gb >= 0,
    ])
    error_message = "router.prices must be >= 0."
  }
  validation {
    # Same range as wal_s3/config.py: below 64 KiB a WAL object costs more in requests than the transfer it replaces.
    condition     = var.settings.wal.max_bytes >= 65536 && var.settings.wal.max_bytes <= 5368709120 && floor(var.settings.wal.max_bytes) == var.settings.wal.max_bytes
    error_message = "wal.max_bytes must be an integer within 64 KiB..5 GiB (65536..5368709120)."
  }
  validation {
    # null: the storage class's default (250 ms standard, 20 ms express; wal_s3/config.py).
    condition     = var.settings.wal.linger_ms == null ? true : (var.settings.wal.linger_ms >= 1 && var.settings.wal.linger_ms <= 60000 && floor(var.settings.wal.linger_ms) == var.settings.wal.linger_ms)
    error_message = "wal.linger_ms must be an integer within 1..60000."
  }
  validation {
    condition     = contains(["standard", "express"], var.settings.wal.storage_class) && var.settings.wal.max_request_cost_share >= 0 && var.settings.wal.max_request_cost_share <= 1
    error_message = "wal.storage_class is standard or express; wal.max_request_cost_share within 0..1."
  }
  validation {
    condition     = var.settings.wal.max_buffered_bytes >= var.settings.wal.max_bytes
    error_message = "wal.max_buffered_bytes must be >= wal.max_bytes."
  }
  validation {
    condition = alltrue([
      var.settings.wal.max_in_flight_puts >= 1 && var.settings.wal.max_in_flight_puts <= 64,
      var.settings.wal.max_attempts >= 1 && var.settings.wal.max_attempts <= 20,
      var.settings.wal.cache_bytes >= 0,
    ])
    error_message = "wal.max_in_flight_puts 1..64, wal.max_attempts 1..20, wal.cache_bytes >= 0."
  }
  validation {
    condition     = length(var.settings.wal.bucket) > 0 && (var.settings.wal.prefix == "" || can(regex("^[^/].*/$", var.settings.wal.prefix)))
    error_message = "wal.bucket must be set; wal.prefix is empty or ends with '/' (and does not start with it)."
  }
  validation {
    condition     = alltrue([for p in [var.settings.wal.checkpoint_prefix, var.settings.wal.epoch_prefix] : can(regex("^_[A-Za-z0-9_.-]*$", p))]) && var.settings.wal.gc_interval_s > 0
    error_message = "wal.checkpoint_prefix and wal.epoch_prefix are single segments starting with '_' (the bucket lifecycle expires only hex-led keys); wal.gc_interval_s > 0."
  }
  validation {
    condition     = alltrue([for z, hps in var.settings.notify.agents : can(regex("^[a-z]{2,4}[0-9]-az[0-9]+$", z)) && length(hps) >= 1 && length(hps) <= 64 && length(distinct(hps)) == length(hps) && alltrue([for hp in hps : can(regex("^[^:\\s]+:[0-9]+$", hp))])])
    error_message = "notify.agents maps AZ ids (use1-az1) to 1..64 distinct host:port addresses."
  }
  validation {
    condition = alltrue([
      var.settings.notify.timeout_s > 0,
      var.settings.notify.max_in_flight_per_zone >= 1 && var.settings.notify.max_in_flight_per_zone <= 4096,
      var.settings.notify.max_attempts >= 1 && var.settings.notify.max_attempts <= 20,
      var.settings.agent.max_concurrent_reads >= 1 && var.settings.agent.max_concurrent_reads <= 256,
      var.settings.agent.max_in_flight_appends >= 1 && var.settings.agent.max_in_flight_appends <= 4096,
      var.settings.agent.max_request_bytes >= 65536 && var.settings.agent.max_request_bytes <= 67108864,
    ])
    error_message = "notify and agent limits out of range (see leader_notify/config.py)."
  }
  validation {
    condition = alltrue([
      length(var.settings.audit.output) > 0,
      var.settings.audit.max_queue >= 1 && var.settings.audit.max_queue <= 10000000,
      var.settings.audit.roll_seconds >= 1,
      var.settings.audit.roll_bytes >= 1024,
    ])
    error_message = "audit: output set, max_queue 1..10000000, roll_seconds >= 1, roll_bytes >= 1024."
  }
}
