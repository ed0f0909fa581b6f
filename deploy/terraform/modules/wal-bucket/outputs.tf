output "bucket_name" {
  description = "Name of the WAL bucket (wal.bucket)."
  value       = aws_s3_bucket.wal.id
}

output "bucket_arn" {
  description = "ARN of the WAL bucket."
  value       = aws_s3_bucket.wal.arn
}

output "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the bucket (created here or passed in)."
  value       = local.kms_key_arn
}

output "wal_prefix" {
  description = "Key prefix of WAL objects (wal.prefix)."
  value       = var.wal_prefix
}

output "audit_prefix" {
  description = "Key prefix of audit records."
  value       = var.audit_prefix
}

output "audit_output" {
  description = "Value for audit.output: the S3 URI of the audit prefix."
  value       = "s3://${aws_s3_bucket.wal.id}/${var.audit_prefix}"
}
