"""Start-up checks and the one-line failures: configuration (exit 2) or environment (exit 1).

Everything a process can check before its first side effect is checked here, in this
order: the configuration (ConfigError, raised while it is built), the secrets, the AWS
credentials and the WAL bucket. What can only fail once running (a broker that does not
answer, S3 refusing the epoch object) is mapped by `startup_errors()` from the
components' own exceptions to one line naming the setting or resource and what to do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from azsidecar.failures import StartupFailure
from core.configload import ConfigError
from core.msk_iam import MskIamError
from kafka_upstream.errors import UpstreamError
from leader_notify.agent.errors import KafkaAppendUnavailable
from proxy.acl_errors import AclSourceError
from wal_s3.config import WalConfig
from wal_s3.errors import WalWriteError
from wal_s3.s3 import S3Error, make_s3_client

CHECK_ATTEMPTS = 4  # S3 answers 503 SlowDown or drops a connection now and then: not a reason to exit
CHECK_BACKOFF_S = 0.5  # 0.5 + 1 + 1.5 s between the attempts


def check_wal_store(wal: WalConfig, bucket: str | None = None) -> None:
    """AWS credentials can be found and the WAL prefix of `bucket` (default wal.bucket; with S3
    Express a zone's directory bucket) can be listed. Raises StartupFailure.

    A one-key LIST under wal.prefix, not HeadBucket: the IAM policies grant s3:ListBucket
    only for the WAL's prefixes (deploy/terraform/modules/iam), which HeadBucket lacks.
    """
    if boto3.session.Session().get_credentials() is None:
        raise StartupFailure("no AWS credentials found (environment, shared config, web identity or instance "
                             "profile): give the process an IAM role or set AWS_PROFILE")
    where = wal.endpoint_url or f"S3 in {wal.region}"
    bucket = bucket or wal.bucket
    client = make_s3_client(wal)
    for attempt in range(1, CHECK_ATTEMPTS + 1):
        try:
            client.list_objects_v2(Bucket=bucket, Prefix=wal.prefix, MaxKeys=1)
            return
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status == 404:
                raise StartupFailure(f"wal.bucket: bucket {bucket!r} does not exist at {where}; create it "
                                     "(deploy/terraform/modules/wal-bucket) or fix wal.bucket / wal.region") from exc
            if status == 403:
                raise StartupFailure(f"wal.bucket: access to {bucket!r} denied at {where}; the process's IAM "
                                     "policy needs s3:ListBucket on it for the prefix wal.prefix "
                                     "(deploy/terraform/modules/iam)") from exc
            if status < 500 or attempt == CHECK_ATTEMPTS:
                raise StartupFailure(f"wal.bucket: {bucket!r} at {where} answered {status}: {exc}") from exc
        except NoCredentialsError as exc:
            raise StartupFailure(f"no AWS credentials found: {exc}") from exc
        except BotoCoreError as exc:
            if attempt == CHECK_ATTEMPTS:
                raise StartupFailure(f"wal.endpoint_url / wal.region: cannot reach {where}: {exc}") from exc
        time.sleep(CHECK_BACKOFF_S * attempt)  # backoff between attempts of a blocking start-up check


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@contextlib.contextmanager
def startup_errors() -> Iterator[None]:
    """Map the components' environment errors (also inside an exception group from a
    nursery) to StartupFailure and configuration errors to ConfigError, with one message.
    Anything else passes through unchanged (a bug keeps its traceback)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - classified below, re-raised if not ours
        leaves = _leaves(exc)
        config = [leaf for leaf in leaves if isinstance(leaf, ConfigError)]
        if config:
            raise config[0] from exc
        for leaf in leaves:
            if isinstance(leaf, StartupFailure):
                raise leaf from exc
            if isinstance(leaf, UpstreamError):
                raise StartupFailure(f"upstream.bootstrap_servers: {leaf}") from exc
            if isinstance(leaf, AclSourceError):
                raise StartupFailure(f"authz.source \"cluster\": {leaf}") from exc
            if isinstance(leaf, KafkaAppendUnavailable):
                raise StartupFailure(str(leaf)) from exc
            if isinstance(leaf, (S3Error, WalWriteError)):
                raise StartupFailure(f"WAL store (wal.bucket, wal.endpoint_url): {leaf}") from exc
            if isinstance(leaf, MskIamError):
                raise StartupFailure(f"upstream MSK IAM (upstream.aws_msk_iam_region): {leaf}") from exc
            if isinstance(leaf, NoCredentialsError):
                raise StartupFailure(f"no AWS credentials found: {leaf}") from exc
        raise
