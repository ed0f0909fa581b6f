output "proxies_security_group_id" {
  description = "Security group to attach to producer tasks or hosts that run the sidecar."
  value       = aws_security_group.proxies.id
}

output "agents_security_group_id" {
  description = "Security group of the agent tasks."
  value       = aws_security_group.agents.id
}

output "agent_port" {
  description = "Port the agents listen on."
  value       = var.agent_port
}

output "metrics_port" {
  description = "Port of the /metrics endpoints."
  value       = var.metrics_port
}
