"""wal_s3/_sigv4.py signs exactly as botocore's S3SigV4Auth does (UNSIGNED-PAYLOAD), byte for byte."""

from __future__ import annotations

import datetime
import random
import string

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from wal_s3._sigv4 import SigV4Signer


class _UnsignedPayload:
    s3 = {"payload_signing_enabled": False}


def botocore_headers(method, url, headers, creds, region, when) -> list[tuple[str, str]]:
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    request.context["client_config"] = _UnsignedPayload()
    auth = S3SigV4Auth(creds, "s3", region)
    import botocore.auth as auth_module

    original = auth_module.get_current_datetime
    auth_module.get_current_datetime = lambda: when
    try:
        auth.add_auth(request)
    finally:
        auth_module.get_current_datetime = original
    return list(request.headers.items())


def test_a_known_request_matches_botocore_exactly():
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    when = datetime.datetime(2026, 11, 22, 18, 0, 5)
    headers = [("Host", "127.0.0.1:4566"), ("If-None-Match", "*"), ("Content-Length", "1234"),
               ("x-amz-meta-zones", "use1-az2,use1-az3"), ("x-amz-sdk-checksum-algorithm", "CRC32"),
               ("x-amz-checksum-crc32", "y/Q5Jg==")]
    target = "/wal/wal/v1/use1-az1/w-1/e-3/000000000042.wal"
    ours = SigV4Signer("us-east-1").sign("PUT", target, dict(headers), access_key=creds.access_key,
                                         secret_key=creds.secret_key, timestamp="20261122T180005Z")
    theirs = botocore_headers("PUT", "http://127.0.0.1:4566" + target, headers, creds, "us-east-1", when)
    assert ours == theirs
    assert ours[-1][0] == "Authorization"
    assert ours[-1][1].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/s3/aws4_request, "
                                  "SignedHeaders=content-length;host;if-none-match;x-amz-checksum-crc32;"
                                  "x-amz-content-sha256;x-amz-date;x-amz-meta-zones;x-amz-sdk-checksum-algorithm, "
                                  "Signature=")


@pytest.mark.parametrize("seed", range(40))
def test_random_requests_match_botocore(seed):
    rng = random.Random(seed)
    secret = "".join(rng.choice(string.ascii_letters + string.digits + "/+") for _ in range(40))
    token = "".join(rng.choice(string.ascii_letters + "/+=") for _ in range(rng.choice([0, 80])))
    creds = Credentials("AKIA" + "".join(rng.choice(string.ascii_uppercase) for _ in range(16)), secret, token or None)
    region = rng.choice(["us-east-1", "eu-west-3", "ap-southeast-2"])
    when = datetime.datetime(2026, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59),
                             rng.randint(0, 59))
    host = rng.choice(["127.0.0.1:4566", "bucket.s3.us-east-1.amazonaws.com", "s3.eu-west-3.amazonaws.com"])
    key = "/".join("".join(rng.choice(string.ascii_letters + "-_.~%2F") for _ in range(rng.randint(1, 12)))
                   for _ in range(rng.randint(1, 4)))
    target = "/" + key
    method = rng.choice(["PUT", "GET"])
    headers = [("Host", host)]
    if method == "GET":
        start = rng.randint(0, 10**9)
        headers.append(("Range", f"bytes={start}-{start + rng.randint(0, 10**7)}"))
    else:
        headers += [("If-None-Match", "*"), ("Content-Length", str(rng.randint(0, 10**8))),
                    ("x-amz-meta-zones", "  use1-az2,\tuse1-az3  "), ("x-amz-checksum-crc32", "AAAAAA==")]
    rng.shuffle(headers)
    ours = SigV4Signer(region).sign(method, target, dict(headers), access_key=creds.access_key,
                                    secret_key=creds.secret_key, token=creds.token,
                                    timestamp=when.strftime("%Y%m%dT%H%M%SZ"))
    assert ours == botocore_headers(method, f"https://{host}{target}", headers, creds, region, when)


def test_the_day_s_signing_key_is_cached_and_follows_a_new_secret_or_day():
    signer = SigV4Signer("us-east-1")
    headers = {"Host": "h"}
    a = signer.sign("GET", "/k", headers, access_key="A", secret_key="s1", timestamp="20261122T000000Z")
    b = signer.sign("GET", "/k", headers, access_key="A", secret_key="s2", timestamp="20261122T000000Z")
    c = signer.sign("GET", "/k", headers, access_key="A", secret_key="s2", timestamp="20261123T000000Z")
    d = signer.sign("GET", "/k", headers, access_key="A", secret_key="s1", timestamp="20261122T000000Z")
    signatures = [h[-1][1].rsplit("=", 1)[1] for h in (a, b, c, d)]
    assert len(set(signatures[:3])) == 3 and signatures[3] == signatures[0]


def test_headers_that_signing_sets_are_refused():
    with pytest.raises(ValueError, match="set by signing"):
        SigV4Signer("us-east-1").sign("GET", "/k", {"Host": "h", "X-Amz-Date": "x"}, access_key="A", secret_key="s")
