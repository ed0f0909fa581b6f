# A complete three-AZ deployment: VPC with one private subnet per AZ (no internet route;
# AWS APIs through VPC endpoints), an MSK cluster with one broker per AZ, the WAL bucket,
# IAM, security groups, one agent service per AZ and one producer service per AZ whose
# tasks carry the sidecar. Producers use bootstrap.servers=localhost:9092.
# MSK runs with TLS in transit and IAM access control: sidecars and agents authenticate
# with SASL/OAUTHBEARER tokens signed by their task roles (port 9098); the roles may
# connect to this cluster and describe, write and read var.kafka_topics only.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  zone_ids    = sort(keys(var.zones))
  bucket_name = "${var.name}-wal-${data.aws_caller_identity.current.account_id}"
  # wal.bucket: the general purpose bucket, or the directory buckets' base name (express).
  wal_bucket    = var.wal.storage_class == "express" ? "${var.name}-wal" : module.wal_bucket.bucket_name
  subnet_ids    = [for z in local.zone_ids : aws_subnet.private[z].id]
  subnet_cidrs  = [for z in local.zone_ids : var.zones[z].subnet_cidr]
  agent_port    = 9400
  metrics_port  = 9464
  msk_bootstrap = split(",", aws_msk_cluster.this.bootstrap_brokers_sasl_iam)
  kafka_port    = 9098 # MSK's SASL/IAM listener (TLS)
  # [upstream] of every sidecar and agent: TLS with the system CAs (MSK's certificates are
  # publicly trusted), IAM tokens from the task role.
  upstream_security = {
    security_protocol  = "SASL_SSL"
    sasl_mechanism     = "OAUTHBEARER"
    aws_msk_iam_region = var.region
  }
  # Interface endpoints the private subnets need: image pull, logs, the HMAC secret.
  interface_endpoints = toset(["ecr.api", "ecr.dkr", "logs", "secretsmanager"])
}

# ------------------------------------------------------------------ network

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:flow logs belong to the account's landing zone, not to this example
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true # Cloud Map names of the agents resolve through the VPC resolver
  enable_dns_hostnames = true
  tags                 = { Name = var.name }
}

resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-default-unused" }
}

resource "aws_subnet" "private" {
  for_each                = var.zones
  vpc_id                  = aws_vpc.this.id
  availability_zone_id    = each.key
  cidr_block              = each.value.subnet_cidr
  map_public_ip_on_launch = false
  tags                    = { Name = "${var.name}-${each.key}" }
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-private" }
}

resource "aws_route_table_association" "private" {
  for_each       = aws_subnet.private
  subnet_id      = each.value.id
  route_table_id = aws_route_table.private.id
}

# WAL traffic must reach S3 through the gateway endpoint: it is free, where a NAT gateway
# would charge per GB and undo the saving.
resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]
  tags              = { Name = "${var.name}-s3" }
}

resource "aws_security_group" "endpoints" {
  name        = "${var.name}-endpoints"
  description = "Interface VPC endpoints (HTTPS from the VPC)"
  vpc_id      = aws_vpc.this.id
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_https" {
  security_group_id = aws_security_group.endpoints.id
  description       = "HTTPS from the VPC"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = var.vpc_cidr
}

resource "aws_vpc_endpoint" "interface" {
  for_each            = local.interface_endpoints
  vpc_id              = aws_vpc.this.id
  service_name        = "com.amazonaws.${var.region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = local.subnet_ids
  security_group_ids  = [aws_security_group.endpoints.id]
  private_dns_enabled = true
  tags                = { Name = "${var.name}-${each.key}" }
}

module "network" {
  source               = "../../modules/network"
  name_prefix          = var.name
  vpc_id               = aws_vpc.this.id
  agent_port           = local.agent_port
  metrics_port         = local.metrics_port
  monitoring_cidrs     = var.monitoring_cidrs
  broker_cidrs         = local.subnet_cidrs
  kafka_ports          = [local.kafka_port]
  aws_api_prefix_lists = { s3 = aws_vpc_endpoint.s3.prefix_list_id }
  https_cidrs          = [var.vpc_cidr]
}

# ------------------------------------------------------------------ keys and secret

data "aws_iam_policy_document" "example_key" {
  #checkov:skip=CKV_AWS_109:a key policy's "*" resource means this key only; this is the AWS default key policy
  #checkov:skip=CKV_AWS_111:a key policy's "*" resource means this key only; this is the AWS default key policy
  #checkov:skip=CKV_AWS_356:a key policy's "*" resource means this key only; this is the AWS default key policy
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

resource "aws_kms_key" "example" {
  description             = "${var.name}: MSK storage and the notification HMAC secret"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.example_key.json
}

# The secret's value is set outside Terraform so it never lands in the state:
#   aws secretsmanager put-secret-value --secret-id <arn> --secret-string "$(openssl rand -hex 32)"
resource "aws_secretsmanager_secret" "hmac" {
  #checkov:skip=CKV2_AWS_57:rotation is a two-deploy key-ring procedure (add, promote, drop), docs/deploy.md
  name        = "${var.name}/notify-hmac-keys"
  description = "azsidecar notification HMAC keys, comma-separated, first one signs"
  kms_key_id  = aws_kms_key.example.arn
}

# ------------------------------------------------------------------ Kafka

resource "aws_security_group" "msk" {
  name        = "${var.name}-msk"
  description = "MSK brokers: Kafka from sidecars and agents"
  vpc_id      = aws_vpc.this.id
}

resource "aws_vpc_security_group_ingress_rule" "msk_from_groups" {
  for_each = {
    proxies = module.network.proxies_security_group_id
    agents  = module.network.agents_security_group_id
  }
  security_group_id            = aws_security_group.msk.id
  description                  = "Kafka SASL/IAM over TLS from ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = local.kafka_port
  to_port                      = local.kafka_port
  referenced_security_group_id = each.value
}

resource "aws_cloudwatch_log_group" "msk" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs by default; broker logs carry no payload
  name              = "/azsidecar/${var.name}/msk"
  retention_in_days = 365
}

resource "aws_msk_cluster" "this" {
  #checkov:skip=CKV_AWS_291:multi-VPC connectivity is off by default; not needed
  cluster_name           = var.name
  kafka_version          = var.msk.kafka_version
  number_of_broker_nodes = length(local.zone_ids) # one broker per zone; MSK sets broker.rack to the AZ id

  broker_node_group_info {
    instance_type   = var.msk.instance_type
    client_subnets  = local.subnet_ids
    security_groups = [aws_security_group.msk.id]
    storage_info {
      ebs_storage_info {
        volume_size = var.msk.volume_size_gb
      }
    }
    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  client_authentication {
    unauthenticated = false
    sasl {
      iam = true
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = aws_kms_key.example.arn
    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  enhanced_monitoring = "PER_BROKER"

  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }
      node_exporter {
        enabled_in_broker = true
      }
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.msk.name
      }
    }
  }
}

# ------------------------------------------------------------------ azsidecar

module "wal_bucket" {
  source              = "../../modules/wal-bucket"
  bucket_name         = local.bucket_name
  wal_expiration_days = var.wal.expiration_days
}

# S3 Express One Zone (wal.storage_class = "express"): the WAL objects go to one directory bucket
# per zone instead; the general purpose bucket above keeps the audit records.
module "wal_directory_buckets" {
  source              = "../../modules/wal-directory-buckets"
  for_each            = var.wal.storage_class == "express" ? toset(["express"]) : toset([])
  base_name           = "${var.name}-wal"
  zone_ids            = toset(local.zone_ids)
  wal_prefix          = module.wal_bucket.wal_prefix
  wal_expiration_days = var.wal.expiration_days
}

module "iam" {
  source                  = "../../modules/iam"
  name_prefix             = var.name
  bucket_arn              = module.wal_bucket.bucket_arn
  kms_key_arn             = module.wal_bucket.kms_key_arn
  hmac_secret_arn         = aws_secretsmanager_secret.hmac.arn
  hmac_secret_kms_key_arn = aws_kms_key.example.arn
  prefixes = {
    wal   = module.wal_bucket.wal_prefix
    audit = module.wal_bucket.audit_prefix
  }
  msk = {
    cluster_arn = aws_msk_cluster.this.arn
    topics      = var.kafka_topics
  }
  directory_bucket_arns = flatten([for m in values(module.wal_directory_buckets) : values(m.bucket_arns)])
}

resource "aws_ecs_cluster" "this" {
  name = var.name
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

module "agents" {
  source             = "../../modules/agents"
  name_prefix        = var.name
  region             = var.region
  vpc_id             = aws_vpc.this.id
  ecs_cluster_arn    = aws_ecs_cluster.this.arn
  zones              = { for z in local.zone_ids : z => { subnet_ids = [aws_subnet.private[z].id], agents = var.agents_per_zone } }
  image              = var.image
  task_role_arn      = module.iam.agent_role_arn
  gc_role_arn        = module.iam.gc_role_arn
  execution_role_arn = module.iam.execution_role_arn
  security_group_ids = [module.network.agents_security_group_id]
  hmac_secret_arn    = aws_secretsmanager_secret.hmac.arn
  bootstrap_servers  = local.msk_bootstrap
  upstream_security  = local.upstream_security
  wal = {
    bucket        = local.wal_bucket
    prefix        = module.wal_bucket.wal_prefix
    storage_class = var.wal.storage_class
  }
  audit_output = module.wal_bucket.audit_output
  ack_modes    = var.ack_modes
  agent_port   = local.agent_port
  metrics_port = local.metrics_port
}

module "sidecar" {
  source            = "../../modules/sidecar"
  for_each          = var.zones
  zone              = each.key
  region            = var.region
  proxy_id_prefix   = "sc-${each.key}"
  metrics_port      = local.metrics_port
  metrics_host      = "0.0.0.0" # scraped on the task ENI from monitoring_cidrs (proxies security group)
  bootstrap_servers = local.msk_bootstrap
  upstream_security = local.upstream_security
  wal = {
    bucket        = local.wal_bucket
    prefix        = module.wal_bucket.wal_prefix
    storage_class = var.wal.storage_class
    max_bytes     = var.wal.max_bytes
    linger_ms     = var.wal.linger_ms
  }
  # MSK reports broker.rack = AZ id, so no broker_zones override is needed.
  router          = { ack_modes = var.ack_modes }
  agent_endpoints = module.agents.agent_endpoints # every agent of every zone: no load balancer in between
  audit_output    = module.wal_bucket.audit_output
  image           = var.image
  hmac_secret_arn = aws_secretsmanager_secret.hmac.arn
  log_group_name  = aws_cloudwatch_log_group.producers.name
}

resource "aws_cloudwatch_log_group" "producers" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs by default; logs carry no payload or secrets
  name              = "/azsidecar/${var.name}/producers"
  retention_in_days = 365
}

# One producer service per zone: on Fargate the sidecar cannot ask instance metadata for
# its zone, so each zone's tasks carry a configuration with that zone's id.
resource "aws_ecs_task_definition" "producer" {
  for_each                 = var.zones
  family                   = "${var.name}-producer-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = "512"
  memory                   = "1024"
  task_role_arn            = module.iam.proxy_role_arn
  execution_role_arn       = module.iam.execution_role_arn

  volume {
    name = module.sidecar[each.key].task_volume_name
  }

  container_definitions = jsonencode([
    {
      name                   = "producer"
      image                  = var.producer_image
      essential              = true
      readonlyRootFilesystem = true
      environment            = [{ name = "KAFKA_BOOTSTRAP_SERVERS", value = module.sidecar[each.key].bootstrap_servers }]
      # Start producing only once the sidecar accepts connections.
      dependsOn = [{ containerName = module.sidecar[each.key].container_definition.name, condition = "HEALTHY" }]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = aws_cloudwatch_log_group.producers.name
          awslogs-region        = var.region
          awslogs-stream-prefix = "producer-${each.key}"
        }
      }
    },
    module.sidecar[each.key].container_definition,
  ])
}

resource "aws_ecs_service" "producer" {
  for_each         = var.zones
  name             = "${var.name}-producer-${each.key}"
  cluster          = aws_ecs_cluster.this.arn
  task_definition  = aws_ecs_task_definition.producer[each.key].arn
  desired_count    = var.producers_per_zone
  launch_type      = "FARGATE"
  platform_version = "LATEST"

  network_configuration {
    subnets          = [aws_subnet.private[each.key].id]
    security_groups  = [module.network.proxies_security_group_id]
    assign_public_ip = false
  }
}
