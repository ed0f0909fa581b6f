output "producer_bootstrap_servers" {
  description = "bootstrap.servers for producers: the sidecar on loopback, in every zone."
  value       = "localhost:9092"
}

output "agent_endpoints" {
  description = "Agent addresses per AZ id, in agent order (notify.agents of the sidecars)."
  value       = module.agents.agent_endpoints
}

output "msk_bootstrap_brokers" {
  description = "MSK bootstrap brokers (SASL/IAM over TLS, port 9098) the sidecars and agents connect to."
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_iam
}

output "msk_client_policy_arn" {
  description = "Kafka (MSK IAM) policy to attach to your own producers' roles with proxy_policy_arn."
  value       = module.iam.msk_client_policy_arn
}

output "wal_bucket" {
  description = "Name of the WAL bucket."
  value       = module.wal_bucket.bucket_name
}

output "hmac_secret_arn" {
  description = "Secret to fill with the notification HMAC keys before the tasks start."
  value       = aws_secretsmanager_secret.hmac.arn
}

output "proxy_policy_arn" {
  description = "Policy to attach to your own producers' roles when you add the sidecar to them."
  value       = module.iam.proxy_policy_arn
}

output "audit_reader_policy_arn" {
  description = "Policy for the role of the Spark audit jobs."
  value       = module.iam.audit_reader_policy_arn
}

output "sidecar_config_toml" {
  description = "Rendered sidecar configuration per zone (no secrets)."
  value       = { for zone, m in module.sidecar : zone => m.config_toml }
}
