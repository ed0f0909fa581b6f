"""Finding 2 without the sidecar: moto's racy conditional PUT kills idempotent producers.

Two Tansu brokers share one moto bucket; one idempotent librdkafka producer writes through
each broker for SECONDS. Tansu rewrites its shared `clusters/<cluster>/meta.json` (every
producer's next sequence per partition) with If-Match on each produce. The script runs
twice, side by side: moto's own PUT ("moto": check and store in two unlocked steps, lost
updates logged) and deploy/local/moto_atomic.py's ("atomic": both under one lock). In both,
moto's gap between the If-Match check and the store of meta.json is widened by WIDEN_S
(fault injection, so the race shows within a minute on any machine).

    flock -s /tmp/azsidecar-heavy.lock .venv/bin/python bench/tansu_meta_race.py [--seconds 60]

Prints per mode: records produced/acknowledged per producer, lost meta.json updates moto
logged, and the producers' fatal errors.

This file is also the moto launcher the runs use (start_moto calls it with
`--conditional-writes MODE -H HOST -p PORT`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WIDEN_S = 0.02  # added between moto's If-Match check and its store of meta.json
PARTITIONS = 4


def moto_launcher(argv: list[str]) -> None:
    from moto.s3.models import S3Backend  # noqa: PLC0415
    from moto.server import main as moto_main  # noqa: PLC0415

    from deploy.local.moto_atomic import log_lost_updates, make_conditional_puts_atomic  # noqa: PLC0415

    mode = argv[1]
    original = S3Backend.put_object

    def widened_store(self, bucket_name, key_name, value, *args, **kwargs):
        if key_name.endswith("meta.json"):
            time.sleep(WIDEN_S)  # fault injection: the race window, not synchronization
        return original(self, bucket_name, key_name, value, *args, **kwargs)

    S3Backend.put_object = widened_store
    if mode == "atomic":
        make_conditional_puts_atomic()
    else:
        log_lost_updates()
    sys.argv = [sys.argv[0], *argv[2:]]
    moto_main(argv[2:])


def run(mode: str, seconds: float) -> str:
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    import deploy.local.processes as procs  # noqa: PLC0415

    procs.MOTO_LAUNCHER = Path(__file__).resolve()
    procs.MOTO_CONDITIONAL_WRITES = mode
    log_dir = Path(tempfile.mkdtemp(prefix=f"tansu-meta-race-{mode}-"))
    with procs.start_moto(log_dir=log_dir) as moto:
        moto.create_bucket("tansu-meta-race")
        with procs.start_tansu_cluster(2, moto.endpoint_url, "tansu-meta-race") as brokers:
            admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
            for future in admin.create_topics([NewTopic("race", PARTITIONS, 1)]).values():
                future.result(30)
            fatal: dict[int, str] = {}
            counts: dict[int, tuple[int, int]] = {}

            def produce(i: int, bootstrap: str) -> None:
                def on_error(err) -> None:
                    if err.fatal():
                        fatal[i] = err.str()

                producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 60_000, "error_cb": on_error})
                acked = [0]

                def delivered(err, _msg) -> None:
                    if err is None:
                        acked[0] += 1

                sent = 0
                end = time.monotonic() + seconds
                try:
                    while time.monotonic() < end and i not in fatal:
                        try:
                            producer.produce("race", value=b"x" * 100, partition=sent % PARTITIONS,
                                             on_delivery=delivered)
                            sent += 1
                        except BufferError:
                            pass  # queue full: poll below makes room
                        producer.poll(0.002)
                    producer.flush(30)
                except Exception as exc:  # noqa: BLE001 - a fatal error also surfaces as KafkaException
                    fatal.setdefault(i, str(exc))
                counts[i] = (sent, acked[0])

            threads = [threading.Thread(target=produce, args=(i, b.bootstrap)) for i, b in enumerate(brokers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(seconds + 120)
            lost = sum("LOST-UPDATE" in line for line in open(moto.log_path, errors="replace"))
    return (f"{mode:6s}: produced/acknowledged per producer {counts}, lost meta.json updates logged {lost}, "
            f"fatal errors {len(fatal)}: {sorted(fatal.values())[:1]} (logs {log_dir})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--conditional-writes":
        moto_launcher(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    for mode in ("moto", "atomic"):
        print(run(mode, args.seconds), flush=True)


if __name__ == "__main__":
    main()
