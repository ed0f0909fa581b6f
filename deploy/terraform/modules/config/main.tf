# Renders the azsidecar TOML file from a typed object, so the sidecar and the agents share
# one set of key names (those of azsidecar/config.py). Every scalar goes through
# jsonencode(): a JSON string or number is also a valid TOML value, so no quoting bugs.
locals {
  toml = templatefile("${path.module}/azsidecar.toml.tftpl", var.settings)
}
