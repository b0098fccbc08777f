"""The cost table of `make test` (fakegpu.testkit.costs), from JUnit XML as pytest writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.testkit import costs

pytest_plugins = ["pytester"]


def test_files_are_ranked_by_their_tests_time_and_bring_ups_listed(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow='''
import time

def test_a(record_property):
    record_property("fakegpu_bringup", "ci-mig=12.5")
    time.sleep(0.2)

def test_b():
    time.sleep(0.2)
''', test_quick='''
def test_c():
    pass
''')
    junit = pytester.path / "junit.xml"
    pytester.runpytest_subprocess(f"--junitxml={junit}").assert_outcomes(passed=3)
    run = costs.read_run(junit)
    assert set(run.files) == {"test_slow.py", "test_quick.py"}
    assert run.files["test_slow.py"].tests == 2 and run.files["test_quick.py"].tests == 1
    assert run.files["test_slow.py"].seconds > run.files["test_quick.py"].seconds
    assert run.bringups == [("ci-mig", 12.5)]
    lines = costs.table([junit], top=1).splitlines()
    assert lines[0].startswith(f"{junit}: 3 tests")
    assert lines[2].endswith("test_slow.py") and "test_quick.py" not in "\n".join(lines)
    assert lines[3].split() == ["12.5", "bring-up", "of", "cluster", "ci-mig"]


@pytest.mark.parametrize(("classname", "file"), [
    ("e2e.test_taints", "e2e/test_taints.py"),
    ("tests.kind.test_chart.TestValues", "tests/kind/test_chart.py"),
    ("fakegpu.conformance.test_slices", "fakegpu/conformance/test_slices.py"),
])
def test_the_test_file_of_a_classname(classname: str, file: str) -> None:
    assert costs.file_of(classname) == file


def test_a_file_that_is_not_junit_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "junit.xml"
    bad.write_text("<testsuites><testcase time='x'")
    assert costs.main([str(bad)]) == costs.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fakegpu costs: {bad}: not a readable JUnit XML file")
    assert "\n" not in err


def test_a_pass_that_wrote_no_report_is_left_out(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert costs.main([str(tmp_path / "junit-kind.xml")]) == 0
    assert capsys.readouterr().out.strip() == ""
