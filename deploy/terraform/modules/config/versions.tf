terraform {
  # optional() object attributes with defaults need 1.3; validations here are self-contained.
  required_version = ">= 1.3.0"
}
