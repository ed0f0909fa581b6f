"""Which local audit sessions start their JVM with C1 only: small local inputs, not large or S3 ones."""

from __future__ import annotations

from spark_audit._io import quick_jit_suits


def test_a_small_local_input_gets_the_quick_jit(tmp_path):
    (tmp_path / "date=2026-01-01" / "hour=00" / "zone=az1").mkdir(parents=True)
    (tmp_path / "date=2026-01-01" / "hour=00" / "zone=az1" / "proxy-1.jsonl.gz").write_bytes(b"x" * 1000)
    assert quick_jit_suits(str(tmp_path))
    assert quick_jit_suits(f"file://{tmp_path}")


def test_an_input_of_32_mib_or_more_keeps_the_jvm_defaults(tmp_path):
    # two files of 16 MiB (sparse: their size, not their blocks, is what counts)
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        with open(tmp_path / name, "wb") as f:
            f.truncate(16 * 1024 * 1024)
    assert not quick_jit_suits(str(tmp_path))


def test_an_s3_input_keeps_the_jvm_defaults():
    assert not quick_jit_suits("s3://bucket/audit")
