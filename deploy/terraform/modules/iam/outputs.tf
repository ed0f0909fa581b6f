output "proxy_policy_arn" {
  description = "Managed policy for the sidecar; attach it to your producer task role or instance role."
  value       = aws_iam_policy.proxy.arn
}

output "proxy_role_arn" {
  description = "Ready role with the proxy policy (ECS task role of the example producers, or EC2 via the instance profile)."
  value       = aws_iam_role.proxy.arn
}

output "proxy_instance_profile_name" {
  description = "Instance profile of the proxy role for EC2 hosts running the systemd sidecar (null when EC2 is not trusted)."
  value       = try(aws_iam_instance_profile.proxy["ec2"].name, null)
}

output "agent_role_arn" {
  description = "ECS task role of the agents."
  value       = aws_iam_role.agent.arn
}

output "gc_role_arn" {
  description = "ECS task role of the scheduled gc task."
  value       = aws_iam_role.gc.arn
}

output "execution_role_arn" {
  description = "ECS execution role for every azsidecar task (and producer tasks that carry the sidecar)."
  value       = aws_iam_role.execution.arn
}

output "audit_reader_policy_arn" {
  description = "Managed policy for the Spark audit jobs' role (EMR, Glue or your own)."
  value       = aws_iam_policy.audit_reader.arn
}

output "msk_client_policy_arn" {
  description = "Kafka (MSK IAM) policy for the sidecar and the agents; attach it to your own producers' roles with the proxy policy (null without var.msk)."
  value       = try(aws_iam_policy.msk_client["msk"].arn, null)
}
