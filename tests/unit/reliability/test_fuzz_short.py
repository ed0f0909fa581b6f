"""A short run of bench/campaign.py's mutation fuzzer over the three codecs (the long run is
`bench/campaign.py --fuzz N`): every input ends in a result or a documented error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("azsidecar_bench_campaign",
                                              Path(__file__).resolve().parents[3] / "bench" / "campaign.py")
campaign = importlib.util.module_from_spec(spec)
spec.loader.exec_module(campaign)


def test_codecs_survive_mutated_inputs():
    results = campaign.fuzz(3000, seed=9, log=lambda line: None)
    assert [r["target"] for r in results] == [
        "kafka_protocol.kafka_codec ServerCodec+decode_request", "wal_s3.format.parse_object",
        "wal_s3.format.parse_zone_range", "leader_notify.protocol Channel",
        "leader_notify.protocol decode_request (behind the MAC)",
        "leader_notify.protocol decode_response (behind the MAC)"]
    for r in results:
        assert r["inputs"] == 3000
        assert r["crashes"] == 0, r["crash_examples"]
        assert r["rejected"] > 0  # the mutations do reach the error paths


def test_an_undocumented_exception_counts_as_a_crash():
    def run(data: bytes) -> None:
        if len(data) > 3:
            raise IndexError("a codec bug")
        raise ValueError("documented")

    [result] = campaign.fuzz(200, seed=1, log=lambda line: None,
                             targets=[("toy", [b"abcdefgh"], run, (ValueError,))])
    assert result["inputs"] == 200
    assert result["crashes"] > 0 and result["rejected"] > 0
    assert result["crashes"] + result["rejected"] == 200
    assert "IndexError" in result["crash_examples"][0]["error"]
