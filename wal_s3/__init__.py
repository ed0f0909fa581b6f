"""wal_s3 package."""
