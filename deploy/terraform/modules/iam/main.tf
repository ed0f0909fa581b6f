# Least-privilege roles and policies. Each component gets only the S3 actions on the key
# prefixes it touches (docs/deploy.md lists them); KMS actions are those SSE-KMS needs:
# GenerateDataKey to write an encrypted object, Decrypt to read one.
#
# The sidecar shares its task's role with the producer (ECS roles are per task), so the
# proxy permissions are a managed policy to attach to the producer's role; a ready role is
# created too for the example and for EC2 hosts.

locals {
  wal_objects        = "${var.bucket_arn}/${var.prefixes.wal}*"
  checkpoint_objects = "${var.bucket_arn}/${var.prefixes.wal}${var.prefixes.checkpoint_segment}/*"
  audit_objects      = "${var.bucket_arn}/${var.prefixes.audit}*"
  hmac_in_ssm        = can(regex("^arn:aws[a-z-]*:ssm:", var.hmac_secret_arn))
  proxy_on_ec2       = contains(tolist(var.proxy_trusted_services), "ec2.amazonaws.com")
  # arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID -> arn:aws:kafka:REGION:ACCOUNT:topic/NAME/UUID/TOPIC
  msk_topic_arns = var.msk == null ? [] : [
    for t in var.msk.topics : "${replace(var.msk.cluster_arn, ":cluster/", ":topic/")}/${t}"
  ]
  # Transactional producers and consumer groups through the sidecar: their coordinator lookups
  # (FindCoordinator) and forwarded transaction/group requests run under the sidecar's role.
  msk_transaction_and_group_arns = var.msk == null ? [] : [
    "${replace(var.msk.cluster_arn, ":cluster/", ":transactional-id/")}/*",
    "${replace(var.msk.cluster_arn, ":cluster/", ":group/")}/*",
  ]
  msk_policies = var.msk == null ? toset([]) : toset(["msk"])
}

# ------------------------------------------------------------------ policies

data "aws_iam_policy_document" "proxy" {
  # Get: a retried PUT that gets 412 reads the object back to see whether it was ours;
  # recovery reads its own unapplied objects.
  # List: taking an epoch lists this writer's epoch markers; with router.ack_modes "wal"
  # topics a starting sidecar (and `azsidecar recover`) also lists the whole WAL prefix for
  # its earlier epochs' objects and then their checkpoints (leader_notify/sender/recovery.py). Object
  # keys lead with a hash, so no narrower prefix holds one writer's objects.
  statement {
    sid       = "ListWalPrefix"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.prefixes.wal}*"]
    }
  }
  statement {
    sid       = "WalObjectsWriteRead"
    actions   = ["s3:PutObject", "s3:GetObject"]
    resources = [local.wal_objects]
  }
  statement {
    # Audit files go up with boto3 upload_file: multipart above 8 MiB, aborted on failure.
    sid       = "AuditRecordsWrite"
    actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
    resources = [local.audit_objects]
  }
  statement {
    sid       = "BucketKeyUse"
    actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
  # S3 Express One Zone (wal.storage_class "express"): a directory bucket authorizes at the
  # bucket, by CreateSession; a ReadWrite session then allows every object call on it.
  dynamic "statement" {
    for_each = length(var.directory_bucket_arns) > 0 ? [var.directory_bucket_arns] : []
    content {
      sid       = "ExpressSessions"
      actions   = ["s3express:CreateSession"]
      resources = statement.value
    }
  }
}

data "aws_iam_policy_document" "agent" {
  statement {
    sid       = "WalObjectsRead"
    actions   = ["s3:GetObject"]
    resources = [local.wal_objects]
  }
  statement {
    sid       = "CheckpointsWrite"
    actions   = ["s3:PutObject"]
    resources = [local.checkpoint_objects]
  }
  statement {
    # Audit files go up with boto3 upload_file: multipart above 8 MiB, aborted on failure.
    sid       = "AuditRecordsWrite"
    actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
    resources = [local.audit_objects]
  }
  statement {
    sid       = "BucketKeyUse"
    actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
  # S3 Express One Zone (wal.storage_class "express"): a directory bucket authorizes at the
  # bucket, by CreateSession; a ReadWrite session then allows every object call on it.
  dynamic "statement" {
    for_each = length(var.directory_bucket_arns) > 0 ? [var.directory_bucket_arns] : []
    content {
      sid       = "ExpressSessions"
      actions   = ["s3express:CreateSession"]
      resources = statement.value
    }
  }
}

# GC lists objects and checkpoints, reads object headers and checkpoint manifests, deletes
# applied objects and their checkpoints. All of it lives under the WAL prefix.
data "aws_iam_policy_document" "gc" {
  statement {
    sid       = "ListWalPrefix"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.prefixes.wal}*"]
    }
  }
  statement {
    sid       = "WalObjectsReadDelete"
    actions   = ["s3:GetObject", "s3:DeleteObject"]
    resources = [local.wal_objects]
  }
  statement {
    sid       = "BucketKeyDecrypt"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
  # S3 Express One Zone (wal.storage_class "express"): a directory bucket authorizes at the
  # bucket, by CreateSession; a ReadWrite session then allows every object call on it.
  dynamic "statement" {
    for_each = length(var.directory_bucket_arns) > 0 ? [var.directory_bucket_arns] : []
    content {
      sid       = "ExpressSessions"
      actions   = ["s3express:CreateSession"]
      resources = statement.value
    }
  }
}

data "aws_iam_policy_document" "audit_reader" {
  statement {
    sid       = "ListAudit"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.prefixes.audit}*"]
    }
  }
  statement {
    sid       = "AuditRecordsRead"
    actions   = ["s3:GetObject"]
    resources = [local.audit_objects]
  }
  statement {
    sid       = "BucketKeyDecrypt"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
}

data "aws_iam_policy_document" "hmac_secret" {
  statement {
    sid       = "ReadNotifyHmacKeys"
    actions   = local.hmac_in_ssm ? ["ssm:GetParameters"] : ["secretsmanager:GetSecretValue"]
    resources = [var.hmac_secret_arn]
  }
  dynamic "statement" {
    for_each = var.hmac_secret_kms_key_arn == null ? [] : [var.hmac_secret_kms_key_arn]
    content {
      sid       = "DecryptNotifyHmacKeys"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

# EC2 hosts have no execution role: the systemd unit's ExecStartPre reads the keys itself
# with the instance profile (aws ssm get-parameter / secretsmanager get-secret-value).
data "aws_iam_policy_document" "hmac_secret_host" {
  statement {
    sid       = "ReadNotifyHmacKeysOnHost"
    actions   = local.hmac_in_ssm ? ["ssm:GetParameter"] : ["secretsmanager:GetSecretValue"]
    resources = [var.hmac_secret_arn]
  }
  dynamic "statement" {
    for_each = var.hmac_secret_kms_key_arn == null ? [] : [var.hmac_secret_kms_key_arn]
    content {
      sid       = "DecryptNotifyHmacKeysOnHost"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

# MSK IAM access control: what the sidecar (forwarding its producers' Metadata, Produce and
# InitProducerId; reading a partition's tail to verify a duplicate answer) and the agent
# (Metadata, Produce of idempotent batches, tail Fetch and ListOffsets) ask the brokers.
data "aws_iam_policy_document" "msk_client" {
  statement {
    sid       = "KafkaClusterConnect"
    actions   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently"]
    resources = var.msk == null ? [] : [var.msk.cluster_arn]
  }
  statement {
    sid       = "KafkaTopicsDescribeWriteRead"
    actions   = ["kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:ReadData"]
    resources = local.msk_topic_arns
  }
  statement {
    sid = "KafkaTransactionsAndGroups"
    actions = [
      "kafka-cluster:DescribeTransactionalId", "kafka-cluster:AlterTransactionalId",
      "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup",
    ]
    resources = local.msk_transaction_and_group_arns
  }
}

resource "aws_iam_policy" "msk_client" {
  for_each    = local.msk_policies
  name        = "${var.name_prefix}-msk-client"
  description = "azsidecar sidecar and agent: connect to the MSK cluster with IAM and produce to its topics."
  policy      = data.aws_iam_policy_document.msk_client.json
  tags        = var.tags
}

resource "aws_iam_role_policy_attachment" "proxy_msk" {
  for_each   = aws_iam_policy.msk_client
  role       = aws_iam_role.proxy.name
  policy_arn = each.value.arn
}

resource "aws_iam_role_policy_attachment" "agent_msk" {
  for_each   = aws_iam_policy.msk_client
  role       = aws_iam_role.agent.name
  policy_arn = each.value.arn
}

resource "aws_iam_policy" "proxy" {
  name        = "${var.name_prefix}-proxy"
  description = "azsidecar proxy (sidecar): write and read WAL objects, write audit records."
  policy      = data.aws_iam_policy_document.proxy.json
  tags        = var.tags
}

resource "aws_iam_policy" "agent" {
  name        = "${var.name_prefix}-agent"
  description = "azsidecar agent: read WAL objects, write checkpoints and audit records."
  policy      = data.aws_iam_policy_document.agent.json
  tags        = var.tags
}

resource "aws_iam_policy" "gc" {
  name        = "${var.name_prefix}-gc"
  description = "azsidecar gc: list, read and delete applied WAL objects and their checkpoints."
  policy      = data.aws_iam_policy_document.gc.json
  tags        = var.tags
}

resource "aws_iam_policy" "audit_reader" {
  name        = "${var.name_prefix}-audit-reader"
  description = "Spark audit jobs: list and read audit records."
  policy      = data.aws_iam_policy_document.audit_reader.json
  tags        = var.tags
}

resource "aws_iam_policy" "hmac_secret" {
  name        = "${var.name_prefix}-hmac-secret"
  description = "ECS execution role: read the notification HMAC keys to inject them as AZSIDECAR_NOTIFY_HMAC_KEYS."
  policy      = data.aws_iam_policy_document.hmac_secret.json
  tags        = var.tags
}

# ------------------------------------------------------------------ roles

data "aws_iam_policy_document" "assume_ecs_tasks" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "assume_proxy" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = sort(tolist(var.proxy_trusted_services))
    }
  }
}

resource "aws_iam_role" "proxy" {
  name               = "${var.name_prefix}-proxy"
  description        = "Producer task or host running the azsidecar sidecar."
  assume_role_policy = data.aws_iam_policy_document.assume_proxy.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "proxy" {
  role       = aws_iam_role.proxy.name
  policy_arn = aws_iam_policy.proxy.arn
}

resource "aws_iam_policy" "hmac_secret_host" {
  for_each    = local.proxy_on_ec2 ? toset(["ec2"]) : toset([])
  name        = "${var.name_prefix}-hmac-secret-host"
  description = "EC2 hosts running the systemd sidecar: read the notification HMAC keys at start."
  policy      = data.aws_iam_policy_document.hmac_secret_host.json
  tags        = var.tags
}

resource "aws_iam_role_policy_attachment" "proxy_hmac_host" {
  for_each   = aws_iam_policy.hmac_secret_host
  role       = aws_iam_role.proxy.name
  policy_arn = each.value.arn
}

resource "aws_iam_instance_profile" "proxy" {
  for_each = local.proxy_on_ec2 ? toset(["ec2"]) : toset([])
  name     = "${var.name_prefix}-proxy"
  role     = aws_iam_role.proxy.name
  tags     = var.tags
}

resource "aws_iam_role" "agent" {
  name               = "${var.name_prefix}-agent"
  description        = "azsidecar agent ECS tasks (one service per AZ)."
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "agent" {
  role       = aws_iam_role.agent.name
  policy_arn = aws_iam_policy.agent.arn
}

resource "aws_iam_role" "gc" {
  name               = "${var.name_prefix}-gc"
  description        = "Scheduled azsidecar gc ECS task."
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "gc" {
  role       = aws_iam_role.gc.name
  policy_arn = aws_iam_policy.gc.arn
}

# One execution role for every azsidecar task: image pull, log delivery (AWS managed
# policy) and the HMAC secret. It is never the role the application code runs as.
resource "aws_iam_role" "execution" {
  name               = "${var.name_prefix}-ecs-execution"
  description        = "ECS execution role of azsidecar tasks: pull image, ship logs, inject the HMAC keys."
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
  tags               = var.tags
}

data "aws_partition" "current" {}

resource "aws_iam_role_policy_attachment" "execution_managed" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy_attachment" "execution_hmac" {
  role       = aws_iam_role.execution.name
  policy_arn = aws_iam_policy.hmac_secret.arn
}
