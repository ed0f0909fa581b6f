"""The local session's heap: a quarter of the machine's memory, between 2 and 6 GiB."""

from __future__ import annotations

import pytest

from spark_audit._io import local_driver_memory_mib

GIB = 1024**3


@pytest.mark.parametrize(("physical_bytes", "heap_mib"), [
    (24 * GIB, 6144),  # this project's 2-core bench machine: a quarter is 6 GiB, the cap
    (64 * GIB, 6144),  # capped: the rollup of 100 M produced batches needs less
    (16 * GIB, 4096),  # a quarter
    (10 * GIB, 2560),  # a quarter, 2.5 GiB
    (4 * GIB, 2048),  # the floor: a quarter (1 GiB) is less than the heap used before
    (0, 2048),  # the OS did not say
])
def test_a_quarter_of_the_machine_between_the_floor_and_the_cap(physical_bytes, heap_mib):
    assert local_driver_memory_mib(physical_bytes) == heap_mib
