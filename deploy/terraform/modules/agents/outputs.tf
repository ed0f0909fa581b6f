output "agent_endpoints" {
  description = "notify.agents for the sidecars: AZ id => [<zone id>-a<i>.<namespace>:<port>, ...] in agent order (the order places partitions: keep it)."
  value = { for zone, z in var.zones : zone => [
    for i in range(z.agents) : "${aws_service_discovery_service.agent["${zone}-a${i}"].name}.${aws_service_discovery_private_dns_namespace.agents.name}:${var.agent_port}"
  ] }
}

output "service_names" {
  description = "ECS service names of each zone's agents, in agent order."
  value       = { for zone, z in var.zones : zone => [for i in range(z.agents) : aws_ecs_service.agent["${zone}-a${i}"].name] }
}

output "log_group_name" {
  description = "CloudWatch log group of the agents and gc."
  value       = aws_cloudwatch_log_group.this.name
}

output "config_toml" {
  description = "Rendered configuration of each zone's agents (no secrets)."
  value       = { for zone, m in module.config : zone => m.toml }
}
