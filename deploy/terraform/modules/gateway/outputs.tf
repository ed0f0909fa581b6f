output "bootstrap_servers" {
  description = "Per zone id, the bootstrap address producers in that zone use: <zone id>.<dns_zone_name>:<listener_port>."
  value       = { for zone, name in local.zone_names : zone => "${name}:${var.listener_port}" }
}

output "load_balancer_dns_names" {
  description = "Per zone id, the DNS name of the zone's network load balancer."
  value       = { for zone, lb in aws_lb.gateway : zone => lb.dns_name }
}

output "workers_per_task" {
  description = "proxy.workers of each gateway task (one per vCPU): each is its own WAL writer; `azsidecar plan --writers-per-zone` = desired_count x this."
  value       = local.workers
}
