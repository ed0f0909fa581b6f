"""deploy/local/zone_wire.py: when each frame leaves the user-space wire (delay, loss, stalls)."""

import random

import pytest

from deploy.local.zone_wire import LinkShape, WireSchedule


class Draws(random.Random):
    """random() and uniform() answer from fixed lists, so a test states every draw."""

    def __init__(self, randoms=(), uniforms=()):
        super().__init__(0)
        self.randoms, self.uniforms = list(randoms), list(uniforms)

    def random(self):
        return self.randoms.pop(0)

    def uniform(self, a, b):
        return self.uniforms.pop(0)


def test_healthy_frames_pass_at_once():
    schedule = WireSchedule(LinkShape(latency_s=0.04, loss=0.5), Draws(), degraded_since=None)
    assert schedule.departure("to_zone", 10.0) == 10.0
    assert schedule.departure("to_bridge", 10.5) == 10.5


def test_degraded_frames_wait_the_latency_and_jitter_in_order():
    shape = LinkShape(latency_s=0.040, jitter_s=0.020)
    schedule = WireSchedule(shape, Draws(uniforms=[0.015, 0.0, 0.010]), degraded_since=0.0)
    assert schedule.departure("to_zone", 1.000) == pytest.approx(1.055)
    # 1.001 + 0.040 = 1.041 would overtake the first frame: it leaves right after it instead
    assert schedule.departure("to_zone", 1.001) == pytest.approx(1.055)
    # the other direction has its own order
    assert schedule.departure("to_bridge", 1.001) == pytest.approx(1.051)


def test_loss_drops_the_frames_whose_draw_is_under_it():
    schedule = WireSchedule(LinkShape(latency_s=0.01, loss=0.02), Draws(randoms=[0.019, 0.02, 0.5]),
                            degraded_since=0.0)
    assert schedule.departure("to_zone", 1.0) is None
    assert schedule.departure("to_zone", 1.0) == pytest.approx(1.01)
    assert schedule.departure("to_zone", 1.1) == pytest.approx(1.11)


def test_a_stall_holds_every_frame_until_it_ends():
    # degraded at 100: every 3 s period flows 2.2 s, then stalls 0.8 s (102.2-103, 105.2-106, ...)
    schedule = WireSchedule(LinkShape(latency_s=0.01, stall_every_s=3.0, stall_s=0.8), Draws(), degraded_since=100.0)
    assert schedule.stall_end(101.0) is None
    assert schedule.stall_end(102.5) == pytest.approx(103.0)
    assert schedule.departure("to_bridge", 102.5) == pytest.approx(103.0)
    assert schedule.departure("to_bridge", 102.9) == pytest.approx(103.0)
    assert schedule.departure("to_bridge", 104.0) == pytest.approx(104.01)
    assert schedule.stall_end(105.3) == pytest.approx(106.0)


def test_restore_and_degrade_again():
    schedule = WireSchedule(LinkShape(latency_s=0.05), Draws(), degraded_since=None)
    schedule.degrade(5.0)
    assert schedule.departure("to_zone", 5.0) == pytest.approx(5.05)
    schedule.restore()
    assert schedule.departure("to_zone", 6.0) == 6.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"loss": 1.0}, "loss: a probability"),
    ({"latency_s": -0.1}, "must be >= 0"),
    ({"stall_every_s": 1.0, "stall_s": 1.0}, "stall_s must be shorter"),
])
def test_bad_shapes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinkShape(**kwargs)
