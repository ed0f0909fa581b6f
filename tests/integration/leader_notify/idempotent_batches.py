"""Record batches as an idempotent producer writes them (producer id, epoch, sequences),
built with aiokafka's own batch builder."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder


def idempotent_batch(producer_id: int, epoch: int, base_sequence: int, values: list[bytes], *,
                     transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence,
                                        batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())
