"""MSK IAM settings: `upstream.sasl_mechanism = "OAUTHBEARER"` with a region, validated at load."""

from __future__ import annotations

import pytest

from azsidecar.config import load_config
from azsidecar.secrets import apply_secrets
from core.configload import ConfigError

IAM = {"upstream.security_protocol": "SASL_SSL", "upstream.sasl_mechanism": "OAUTHBEARER",
       "upstream.aws_msk_iam_region": "us-east-1"}


@pytest.mark.parametrize("overrides,message", [
    ({**IAM, "upstream.aws_msk_iam_region": ""}, "upstream.aws_msk_iam_region: '' is not an AWS region"),
    ({**IAM, "upstream.aws_msk_iam_region": "US_EAST_1"}, "upstream.aws_msk_iam_region: 'US_EAST_1' is not"),
    ({**IAM, "upstream.security_protocol": "SASL_PLAINTEXT"}, "requires security_protocol SASL_SSL"),
    ({**IAM, "upstream.sasl_username": "sidecar"}, "not used with OAUTHBEARER (MSK IAM)"),
    ({**IAM, "upstream.sasl_password_file": "/run/secrets/p"}, "not used with OAUTHBEARER (MSK IAM)"),
    ({**IAM, "upstream.aws_msk_iam_role_arn": "role/x"}, "upstream.aws_msk_iam_role_arn: 'role/x' is not a role ARN"),
    ({"upstream.aws_msk_iam_region": "us-east-1"}, "only with sasl_mechanism OAUTHBEARER"),
    ({"upstream.security_protocol": "SASL_SSL", "upstream.sasl_mechanism": "AWS_MSK_IAM"},
     "'AWS_MSK_IAM' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
])
def test_bad_msk_iam_settings_name_their_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-2", "us-gov-west-1", "ap-southeast-4"])
def test_msk_iam_config_loads_and_needs_no_password(region):
    config = apply_secrets(load_config(overrides={**IAM, "upstream.aws_msk_iam_region": region}), environ={})
    assert config.upstream.msk_iam and config.upstream.tls
    assert (config.upstream.aws_msk_iam_region, config.upstream.sasl_password) == (region, "")


def test_role_arn_is_accepted():
    arn = "arn:aws:iam::123456789012:role/azsidecar"
    config = load_config(overrides={**IAM, "upstream.aws_msk_iam_role_arn": arn})
    assert config.upstream.aws_msk_iam_role_arn == arn
