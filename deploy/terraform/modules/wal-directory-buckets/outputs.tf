output "base_name" {
  description = "Value for wal.bucket (with wal.storage_class = \"express\")."
  value       = var.base_name
}

output "bucket_names" {
  description = "Directory bucket name by AZ id."
  value       = { for z, b in aws_s3_directory_bucket.wal : z => b.bucket }
}

output "bucket_arns" {
  description = "Directory bucket ARN (arn:aws:s3express:...) by AZ id, for s3express:CreateSession grants."
  value       = { for z, b in aws_s3_directory_bucket.wal : z => b.arn }
}

output "wal_prefix" {
  description = "Key prefix of WAL objects (wal.prefix)."
  value       = var.wal_prefix
}
