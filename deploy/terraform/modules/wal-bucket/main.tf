# The WAL bucket. Decisions (docs/deploy.md explains each):
# - SSE-KMS with an S3 Bucket Key: one KMS data key per bucket-key period instead of one
#   KMS request per object, which matters at ~100 WAL PUTs per second.
# - No versioning: WAL objects are written once (If-None-Match: *) and deleted by GC within
#   seconds to minutes; with versioning every deleted object would be kept as a noncurrent
#   version for at least a day, about 86 TB-days of storage per day at 1 GB/s.
# - Lifecycle: WAL objects expire after wal_expiration_days (GC backstop); audit records go
#   to STANDARD_IA; unfinished multipart uploads are aborted. WAL object keys are
#   `<wal_prefix><4 hex digits>/wal/<zone>/...` (wal_s3/writer.py object_key) while the
#   writers' epoch markers and the agents' checkpoints live under `<wal_prefix>_epochs/` and
#   `<wal_prefix>_checkpoints/`. S3 filters have no "exclude", so one rule per leading hex
#   digit expires exactly the objects: an expired epoch marker would let a restarted writer
#   pick an epoch number again and be fenced by its own old keys.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  hex_digits  = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f"]
  create_key  = var.kms_key_arn == null
  kms_key_arn = local.create_key ? one([for k in values(aws_kms_key.wal) : k.arn]) : var.kms_key_arn
}

data "aws_iam_policy_document" "key" {
  #checkov:skip=CKV_AWS_109:a key policy's "*" resource means this key only; this is the AWS default key policy
  #checkov:skip=CKV_AWS_111:a key policy's "*" resource means this key only; this is the AWS default key policy
  #checkov:skip=CKV_AWS_356:a key policy's "*" resource means this key only; this is the AWS default key policy
  # Account-root administration is the AWS default key policy: access is then granted by
  # the IAM policies of modules/iam, which name this key explicitly.
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "wal" {
  for_each                = local.create_key ? toset(["wal"]) : toset([])
  description             = "SSE-KMS key of the azsidecar WAL bucket ${var.bucket_name}"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}

resource "aws_kms_alias" "wal" {
  for_each      = aws_kms_key.wal
  name          = "alias/${replace(var.bucket_name, ".", "-")}" # alias names allow no dots
  target_key_id = each.value.key_id
}

resource "aws_s3_bucket" "wal" {
  #checkov:skip=CKV_AWS_21:versioning would keep every GC-deleted WAL object for a day (docs/deploy.md, Versioning)
  #checkov:skip=CKV_AWS_144:cross-region replication of transient WAL objects would add inter-region transfer, the cost this project removes
  #checkov:skip=CKV_AWS_18:server access logs at WAL request rates cost more than the WAL; use CloudTrail data events when needed
  #checkov:skip=CKV2_AWS_62:no consumer of bucket events; agents are told by notifications, not S3 events
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "wal" {
  bucket = aws_s3_bucket.wal.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "wal" {
  bucket                  = aws_s3_bucket.wal.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "wal" {
  bucket = aws_s3_bucket.wal.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = local.kms_key_arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "wal" {
  bucket = aws_s3_bucket.wal.id

  dynamic "rule" {
    for_each = toset(local.hex_digits)
    content {
      id     = "wal-expire-gc-backstop-${rule.value}"
      status = "Enabled"
      filter {
        prefix = "${var.wal_prefix}${rule.value}"
      }
      expiration {
        days = var.wal_expiration_days
      }
    }
  }

  rule {
    id     = "audit-infrequent-access"
    status = "Enabled"
    filter {
      prefix = var.audit_prefix
    }
    transition {
      days          = var.audit_ia_transition_days
      storage_class = "STANDARD_IA"
    }
    dynamic "expiration" {
      for_each = var.audit_expiration_days == null ? [] : [var.audit_expiration_days]
      content {
        days = expiration.value
      }
    }
  }

  rule {
    id     = "abort-incomplete-multipart"
    status = "Enabled"
    filter {
      prefix = ""
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

# TLS only. No "deny PUTs without the SSE header" statement: writers rely on the bucket's
# default encryption and send no SSE headers, which such a statement would refuse.
data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.wal.arn,
      "${aws_s3_bucket.wal.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "wal" {
  bucket = aws_s3_bucket.wal.id
  policy = data.aws_iam_policy_document.bucket.json
  # The public access block must exist first, or a racing policy could be evaluated without it.
  depends_on = [aws_s3_bucket_public_access_block.wal]
}
