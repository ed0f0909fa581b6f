"""deploy/local/s3_faults.py in front of moto, driven by a real boto3 client (no retries).

Each fault at rate 1.0 must reach the client as the S3 error botocore would see from AWS.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from deploy.local.processes import DUMMY_CREDENTIALS, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@contextlib.contextmanager
def injector(moto_server, tmp_path, **rates):
    stats = tmp_path / "stats.json"
    argv = [sys.executable, "-m", "deploy.local.s3_faults", "--upstream", f"127.0.0.1:{moto_server.port}",
            "--stats", str(stats)]
    for name, value in rates.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the proxy listens (or exits: empty line)
        assert line.startswith("listening="), line
        yield "http://" + line.strip().removeprefix("listening="), stats
    finally:
        stop_process(proc)
        proc.stdout.close()


def client(endpoint: str, read_timeout_s: float = 5.0):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                        config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                      read_timeout=read_timeout_s, connect_timeout=2))


def test_no_faults_pass_requests_through_and_count_them(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    with injector(server, tmp_path) as (endpoint, stats):
        s3 = client(endpoint)
        s3.put_object(Bucket=bucket, Key="a", Body=b"x" * 100_000)
        assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"x" * 100_000
    assert json.loads(stats.read_text()) == {"pass": 2, "requests": 2}


@pytest.mark.parametrize(("fault", "code", "status"), [("rate_503", "SlowDown", 503), ("rate_500", "InternalError", 500)])
def test_error_faults_answer_s3_errors(s3_bucket, tmp_path, fault, code, status):
    server, bucket = s3_bucket
    with injector(server, tmp_path, **{fault: 1.0}) as (endpoint, _):
        with pytest.raises(ClientError) as info:
            client(endpoint).put_object(Bucket=bucket, Key="a", Body=b"x" * 1000)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    with pytest.raises(ClientError):  # the object never reached moto
        client(f"http://127.0.0.1:{server.port}").head_object(Bucket=bucket, Key="a")


def test_reset_fault_breaks_the_connection(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    with injector(server, tmp_path, rate_reset=1.0) as (endpoint, _):
        with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
            client(endpoint).get_object(Bucket=bucket, Key="missing")


def test_stall_fault_delays_or_times_out(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    with injector(server, tmp_path, rate_stall=1.0, stall_s=1.5) as (endpoint, _):
        # A bodiless request: a PUT carries "Expect: 100-continue", and botocore's one-second wait
        # for the interim answer races the stall (the PUT then passed in some runs, CI included).
        with pytest.raises(ReadTimeoutError):
            client(endpoint, read_timeout_s=0.5).head_bucket(Bucket=bucket)
        started = time.monotonic()
        client(endpoint, read_timeout_s=5.0).put_object(Bucket=bucket, Key="b", Body=b"2")
        assert time.monotonic() - started >= 1.5  # held, then passed on
    assert client(f"http://127.0.0.1:{server.port}").get_object(Bucket=bucket, Key="b")["Body"].read() == b"2"
