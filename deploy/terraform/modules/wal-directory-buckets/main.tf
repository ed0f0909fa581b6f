# S3 Express One Zone WAL: one directory bucket per Availability Zone (wal.storage_class =
# "express"). A sidecar PUTs into its own zone's bucket (single-digit ms); agents of the other
# zones read from it (no transfer fee within a region). Names follow the rule S3 sets for
# directory buckets, `<base>--<az-id>--x-s3`, which is what wal.bucket_for(zone) derives from
# wal.bucket = base_name (wal_s3/config.py). Decisions (docs/latency-and-cost.md):
# - Default encryption (SSE-S3): directory buckets encrypt every object; SSE-KMS there costs a
#   KMS request per CreateSession, not per object, but adds a key per zone for transient data.
# - Lifecycle: as in modules/wal-bucket, WAL objects (`<wal_prefix><hex digit>...`) expire after
#   wal_expiration_days behind `azsidecar gc`; epoch markers and checkpoints never do.

locals {
  hex_digits = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f"]
}

resource "aws_s3_directory_bucket" "wal" {
  for_each        = var.zone_ids
  bucket          = "${var.base_name}--${each.key}--x-s3"
  data_redundancy = "SingleAvailabilityZone"
  type            = "Directory"
  force_destroy   = var.force_destroy
  location {
    name = each.key
    type = "AvailabilityZone"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "wal" {
  for_each = aws_s3_directory_bucket.wal
  bucket   = each.value.bucket

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
