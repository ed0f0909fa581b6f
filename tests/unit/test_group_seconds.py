"""The suite's scheduling hints: seconds per xdist group from a JUnit report."""

from __future__ import annotations

from tests import group_seconds


def test_seconds_per_group_from_the_names_xdist_reports(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.system.e2e.test_a" name="test_one@system" time="10.5"/>'
        '<testcase classname="tests.system.e2e.test_b" name="test_two[x]@system" time="4.0"/>'
        '<testcase classname="tests.integration.test_c" name="test_three@integration/test_c.py" time="1.25"/>'
        '<testcase classname="tests.unit.test_d" name="test_four" time="3.0"/>'  # the unit tier: no group
        '</testsuite></testsuites>')
    assert group_seconds.from_junit(str(report)) == {"system": 14.5, "integration/test_c.py": 1.2}


def test_a_group_without_a_figure_counts_its_tests():
    measured = {"system": 900.0}
    assert group_seconds.expected_s("system", 50, measured) == 900.0
    assert group_seconds.expected_s("integration/new_test.py", 3, measured) == 3 * group_seconds.DEFAULT_TEST_S
