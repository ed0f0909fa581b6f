"""The suite's CPU-per-test accounting (tests/cpu_per_test.py): /proc lines, process trees, the table."""

from __future__ import annotations

from tests import cpu_per_test


def test_a_stat_line_whose_command_holds_spaces_and_parentheses():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    line = "4242 (java (C1) x) S 17 4242 4242 0 -1 4194560 900 0 3 0 250 40 7 5 20 0 31 0 1000\n"
    assert cpu_per_test.parse_stat(line) == (4242, 17, 290, 12)


def test_the_tree_counts_the_root_its_descendants_and_what_they_reaped_and_nothing_else():
    processes = {
        10: (1, 5, 2),     # the worker: 5 ticks of its own, 2 of children it reaped
        11: (10, 3, 0),    # a broker it started
        12: (11, 4, 1),    # started by the broker, itself reaped one child of 1 tick
        20: (1, 100, 50),  # someone else's process
        21: (20, 9, 0),
    }
    assert cpu_per_test.tree_ticks(processes, 10) == 5 + 2 + 3 + 4 + 1
    assert cpu_per_test.tree_ticks(processes, 11) == 3 + 4 + 1
    assert cpu_per_test.tree_ticks(processes, 99) == 0  # gone: nothing


def test_the_table_sums_per_file_most_cpu_first():
    rows = [
        {"nodeid": "tests/a.py::test_one", "wall_s": 10.0, "cpu_s": 2.5},
        {"nodeid": "tests/b.py::test_two[x]", "wall_s": 3.0, "cpu_s": 4.0},
        {"nodeid": "tests/a.py::test_three", "wall_s": 1.0, "cpu_s": 0.5},
    ]
    assert cpu_per_test.by_file(rows) == [("tests/b.py", 4.0, 3.0, 1), ("tests/a.py", 3.0, 11.0, 2)]
