"""The benchmark scripts' parsing and aggregation (never their timings): the e2e wall times read
from JUnit reports, the no-op library's symbols, the medians and ratios of the NVML table."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import e2e_times  # noqa: E402
import nvml_peers  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">
<testsuite name="pytest" errors="1" failures="1" skipped="2" tests="6" time="100.5"
 timestamp="2026-11-30T21:06:17+00:00">
<testcase classname="tests.nvml.test_x" name="a" time="1.5" />
<testcase classname="tests.kind.test_chart" name="b" time="2.0" />
<testcase classname="e2e.test_selectors" name="c" time="30.25" />
<testcase classname="e2e.test_selectors" name="d" time="10.0" />
<testcase classname="fakegpu.conformance.test_prepare" name="e" time="40.0" />
<testcase classname="e2e.test_taints" name="f" time="5.0" />
</testsuite></testsuites>"""


def test_junit_groups_cluster_suites_from_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    r = e2e_times.parse(path)
    assert (r.provider, r.wall_s, r.tests, r.failures, r.errors, r.skipped) == (
        "embedded", 100.5, 6, 1, 1, 2)
    assert (r.cluster_tests, r.cluster_s, r.other_s, r.outside_s) == (4, 85.2, 3.5, 11.8)
    assert list(r.modules.items()) == [("e2e.test_selectors", 40.2),
                                       ("fakegpu.conformance.test_prepare", 40.0),
                                       ("e2e.test_taints", 5.0)]


def test_junit_kind_report_counts_every_case_as_cluster(tmp_path: Path) -> None:
    path = tmp_path / "junit-kind.xml"
    path.write_text(JUNIT)
    r = e2e_times.parse(path)
    assert (r.provider, r.cluster_tests, r.other_s) == ("kind", 6, 0.0)


@pytest.mark.parametrize("text, expected", [
    ("<testsuites", "not readable as XML"),
    ("<testsuites/>", "no <testsuite> element"),
    ('<testsuite time="fast"/>', "time='fast' is no number"),
])
def test_junit_bad_report_names_the_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "junit-x.xml"
    path.write_text(text)
    with pytest.raises(e2e_times.BadReport, match=expected) as info:
        e2e_times.parse(path)
    assert str(path) in str(info.value)


def test_junit_cli_bad_report_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    path = tmp_path / "junit.xml"
    path.write_text("<nope")
    assert e2e_times.main([str(path), "--json", str(tmp_path / "out.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                    reason="gcc and nm are needed to build the no-op library")
def test_noop_library_exports_what_fakegpu_exports(tmp_path: Path) -> None:
    from fakegpu.nvml import env

    fakegpu = env.libdir() / env.LIBNAME
    noop = nvml_peers.build_noop(fakegpu, tmp_path)
    assert noop.path is not None
    wanted = nvml_peers.exported_functions(fakegpu)
    assert "nvmlDeviceGetName" in wanted
    assert nvml_peers.exported_functions(noop.path) == wanted
    # it really answers SUCCESS without touching its arguments
    out = subprocess.run([sys.executable, "-c",
                          "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); "
                          "print(l.nvmlInit_v2(), l.nvmlDeviceGetName(None, None, 0))",
                          str(noop.path)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0"]


def test_medians_and_ratios() -> None:
    samples = {lib: {b: {c: [] for c in nvml_peers.CALLS} for b in nvml_peers.BINDINGS}
               for lib in ("fakegpu", "no-op")}
    for b in nvml_peers.BINDINGS:
        for c in nvml_peers.CALLS:
            samples["fakegpu"][b][c] += [3.0, 1.0, 2.0]
            samples["no-op"][b][c] += [8.0, 10.0, 9.0]
    medians = nvml_peers.aggregate(samples)
    assert medians["fakegpu"]["C"]["nvmlDeviceGetName"] == 2.0
    over = nvml_peers.ratios(medians, "fakegpu", "no-op")
    assert over["pynvml"]["nvmlDeviceGetMigMode"] == pytest.approx(2 / 9)
    assert nvml_peers.ratios(medians, "fakegpu", "nvml-mock") == {}  # the peer not built
