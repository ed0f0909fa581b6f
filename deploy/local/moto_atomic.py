"""moto_server whose conditional PUTs are atomic, as they are on S3.

moto 5.x checks a PUT's If-Match / If-None-Match and then stores the object in separate
steps without a lock, and its server handles requests in threads: two conditional PUTs of
the same key can both pass the check and both succeed, the later one silently replacing
the earlier (a lost update). S3 evaluates the condition and the write atomically.

Tansu keeps every idempotent producer's next sequence per partition in one object shared by
all brokers (`clusters/<cluster>/meta.json`), rewritten with If-Match on every produce. A
lost update there moves a partition's expected sequence back; the leader then answers the
producer's next batch OUT_OF_ORDER_SEQUENCE_NUMBER although nothing was missing, and
librdkafka dies of "sequence desynchronization" (docs/reliability.md, finding 2).

`--conditional-writes atomic` (the default) runs each conditional PUT's check and store
under a lock chosen by the key (64 stripes: PUTs of one key are serialized, others rarely). `--conditional-writes moto` keeps moto's behaviour and only logs each lost
update it notices ("LOST-UPDATE key=..."), to show the race in a run.

    python deploy/local/moto_atomic.py -H 127.0.0.1 -p 4566 [--conditional-writes moto]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_CONDITION_HEADERS = ("If-Match", "If-None-Match")
LOCK_STRIPES = 64


def _conditional(response: Any) -> bool:
    return any(response.headers.get(h) for h in _CONDITION_HEADERS)


def make_conditional_puts_atomic() -> Callable[[], None]:
    """Patch moto's S3 PUT handler so a conditional PUT checks and stores under one lock.

    Returns the function that undoes the patch (tests run moto in-process).
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - moto is heavy; import on use

    original = S3Response.put_object
    # Striped by key: the race is between PUTs of one key, and one lock for all keys would
    # serialize the WAL writer's If-None-Match PUTs of 8 MiB objects (S3 does not).
    locks = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def put_object(self: Any) -> Any:
        if not _conditional(self):
            return original(self)
        with locks[hash((self.bucket_name, self.parse_key_name())) % LOCK_STRIPES]:
            return original(self)

    S3Response.put_object = put_object  # type: ignore[method-assign]  # patching moto's handler is the point

    def undo() -> None:
        S3Response.put_object = original  # type: ignore[method-assign]  # moto's own handler back

    return undo


def log_lost_updates(out: Any = sys.stderr) -> Callable[[], None]:
    """Keep moto's racy PUT but log each If-Match PUT that succeeded against a version that
    another successful PUT had already replaced. Returns the undo function."""
    from moto.s3.responses import S3Response  # noqa: PLC0415

    original = S3Response.put_object
    lock = threading.Lock()
    current: dict[str, str] = {}  # key -> ETag of the last successful PUT seen

    def put_object(self: Any) -> Any:
        if_match = (self.headers.get("If-Match") or "").strip('"')
        result = original(self)
        status, headers = result[0], result[1]
        if status == 200:
            key = f"{self.bucket_name}/{self.parse_key_name()}"
            etag = str(headers.get("ETag", "")).strip('"')
            with lock:
                before = current.get(key)
                current[key] = etag
            if if_match and before is not None and before != if_match:
                print(f"LOST-UPDATE {time.strftime('%H:%M:%S')} key={key} if_match={if_match} "
                      f"replaced_version={before}", file=out, flush=True)
        return result

    S3Response.put_object = put_object  # type: ignore[method-assign]  # patching moto's handler is the point

    def undo() -> None:
        S3Response.put_object = original  # type: ignore[method-assign]  # moto's own handler back

    return undo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conditional-writes", choices=("atomic", "moto"), default="atomic")
    args, moto_args = parser.parse_known_args(argv)
    if args.conditional_writes == "atomic":
        make_conditional_puts_atomic()
    else:
        log_lost_updates()
    from moto.server import main as moto_main  # noqa: PLC0415

    sys.argv = [sys.argv[0], *moto_args]  # moto's main falls back to sys.argv when given none
    moto_main(moto_args)


if __name__ == "__main__":
    main()
