"""E2E suite wall time per provider, from the JUnit reports of a test run (no rerun).

`make test` writes reports/junit.xml (everything on the embedded provider: unit tests, e2e
suites, conformance), reports/junit-nvidia.xml (the NVIDIA-compatible pass, embedded) and
reports/junit-kind.xml (the e2e suites on kind). Each report's <testsuite time> is the wall
time of that pytest run; a test case's time includes its setup and teardown, so the first e2e
test of a run carries the cluster's bring-up. Cases are grouped by what they exercise: the
suites on the session cluster (e2e.*, fakegpu.conformance.*; in the kind report, run with
-m e2e, every case) and the rest (unit and integration tests, tests/cluster's own
bring-ups); what remains of the wall time is outside any case (collection, and the session
clusters' bring-ups, which the pytest plugin keeps out of the tests' time).

Usage: .venv/bin/python benchmarks/e2e_times.py [REPORT.xml ... | --dir DIR] [--json FILE]
       (default: reports/junit*.xml)
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchlib import machine

REPO = Path(__file__).resolve().parents[1]
# Which provider and driver each report of `make test` ran on (Makefile: test, test-nvidia,
# test-kind); any other report is labelled by its file name.
PROVIDERS = {"junit.xml": "embedded", "junit-nvidia.xml": "embedded, NVIDIA-compatible",
             "junit-kind.xml": "kind"}
CLUSTER_SUITES = ("e2e.", "fakegpu.conformance.")
ALL_E2E = {"junit-kind.xml"}  # run with -m e2e: every case is on the cluster


class BadReport(Exception):
    """A report that is no pytest JUnit XML; the message names the file and what is wrong."""


@dataclass
class Report:
    file: str
    provider: str
    started: str  # the run's timestamp, as pytest wrote it
    wall_s: float  # the pytest run, end to end
    tests: int
    failures: int
    errors: int
    skipped: int
    cluster_tests: int
    cluster_s: float  # summed time of the cluster suites' cases (with their fixtures)
    other_s: float  # summed time of every other case
    outside_s: float  # the run's wall time outside any case: collection, cluster bring-ups
    modules: dict[str, float] = field(default_factory=dict)  # cluster suite module -> seconds


def _float(element: ET.Element, attr: str, where: str) -> float:
    try:
        return float(element.attrib.get(attr, "0"))
    except ValueError as exc:
        raise BadReport(f"{where}: {attr}={element.attrib[attr]!r} is no number") from exc


def parse(path: Path, provider: str | None = None) -> Report:
    """One JUnit file: its totals, and the time per cluster suite module."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise BadReport(f"{path}: not readable as XML ({exc})") from exc
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise BadReport(f"{path}: no <testsuite> element (expected pytest --junitxml output)")
    report = Report(file=path.name, provider=provider or PROVIDERS.get(path.name, path.stem),
                    started=suites[0].attrib.get("timestamp", ""), wall_s=0.0, tests=0,
                    failures=0, errors=0, skipped=0, cluster_tests=0, cluster_s=0.0,
                    other_s=0.0, outside_s=0.0)
    for suite in suites:
        where = f"{path}: <testsuite name={suite.attrib.get('name', '?')!r}>"
        report.wall_s += _float(suite, "time", where)
        for counter in ("tests", "failures", "errors", "skipped"):
            setattr(report, counter, getattr(report, counter)
                    + int(_float(suite, counter, where)))
        for case in suite.iter("testcase"):
            seconds = _float(case, "time", f"{where} <testcase {case.attrib.get('name', '?')}>")
            classname = case.attrib.get("classname", "")
            if path.name in ALL_E2E or classname.startswith(CLUSTER_SUITES):
                report.cluster_tests += 1
                report.cluster_s += seconds
                report.modules[classname] = report.modules.get(classname, 0.0) + seconds
            else:
                report.other_s += seconds
    report.wall_s = round(report.wall_s, 1)
    report.cluster_s = round(report.cluster_s, 1)
    report.other_s = round(report.other_s, 1)
    report.outside_s = round(max(0.0, report.wall_s - report.cluster_s - report.other_s), 1)
    report.modules = {k: round(v, 1) for k, v in
                      sorted(report.modules.items(), key=lambda kv: -kv[1])}
    return report


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def table(reports: list[Report]) -> str:
    rows = [f"{'provider':<28} {'tests':>5} {'failed':>6} {'run wall':>14} "
            f"{'cluster suites':>14} {'(cases)':>7} {'other':>10} {'outside':>10}"]
    for r in reports:
        rows.append(f"{r.provider:<28} {r.tests:>5} {r.failures + r.errors:>6} "
                    f"{minutes(r.wall_s):>14} {minutes(r.cluster_s):>14} "
                    f"{r.cluster_tests:>7} {r.other_s:>8.1f} s {r.outside_s:>8.1f} s")
    total = sum(r.wall_s for r in reports)
    rows.append(f"{'all runs':<28} {sum(r.tests for r in reports):>5} "
                f"{sum(r.failures + r.errors for r in reports):>6} {minutes(total):>14}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path,
                        help="JUnit files (default: reports/junit*.xml)")
    parser.add_argument("--dir", type=Path, default=REPO / "reports",
                        help="without REPORTs: the junit*.xml of this directory "
                             "(default %(default)s)")
    parser.add_argument("--json", type=Path,
                        default=REPO / "reports" / "benchmarks" / "e2e_times.json")
    args = parser.parse_args(argv)
    files = args.reports or sorted(args.dir.glob("junit*.xml"))
    if not files:
        print("no JUnit reports: run `make test` first (or name the files)")
        return 0
    try:
        reports = [parse(f) for f in files]
    except BadReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(reports))
    for r in reports:
        slow = ", ".join(f"{m.split('.')[-1]} {s:.0f} s" for m, s in list(r.modules.items())[:4])
        print(f"  {r.provider}: slowest cluster suites: {slow or '-'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"benchmark": "e2e_times", "machine": machine(),
                                     "reports": [asdict(r) for r in reports]}, indent=1) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
