output "agent_endpoints" {
  description = "notify.agents for the sidecars: AZ id => <zone id>.<namespace>:<port>."
  value       = { for zone, svc in aws_service_discovery_service.agent : zone => "${svc.name}.${aws_service_discovery_private_dns_namespace.agents.name}:${var.agent_port}" }
}

output "service_names" {
  description = "ECS service name of each zone's agents."
  value       = { for zone, svc in aws_ecs_service.agent : zone => svc.name }
}

output "log_group_name" {
  description = "CloudWatch log group of the agents and gc."
  value       = aws_cloudwatch_log_group.this.name
}

output "config_toml" {
  description = "Rendered configuration of each zone's agents (no secrets)."
  value       = { for zone, m in module.config : zone => m.toml }
}
