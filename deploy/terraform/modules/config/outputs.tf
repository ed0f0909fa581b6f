output "toml" {
  description = "The rendered azsidecar configuration file (TOML); contains no secrets."
  value       = local.toml
}
