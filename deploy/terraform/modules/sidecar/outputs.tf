output "container_definition" {
  description = "ECS container definition of the sidecar; add it to the producer task's container_definitions and make the producer dependsOn it (HEALTHY)."
  value       = local.container_definition
}

output "task_volume_name" {
  description = "Task volume the producer task must declare (volume { name = ... }): the sidecar writes its config file there."
  value       = local.volume_name
}

output "config_toml" {
  description = "Rendered sidecar configuration (no secrets); the same file for the systemd unit."
  value       = module.config.toml
}

output "systemd_unit" {
  description = "systemd unit for EC2 producer hosts (install as /etc/systemd/system/azsidecar-proxy.service)."
  value       = local.systemd_unit
}

output "bootstrap_servers" {
  description = "What producers set as bootstrap.servers: the sidecar on loopback."
  value       = "localhost:${var.listen_port}"
}
