"""What a test run cost, from its JUnit XML files: the slowest test files and each bring-up.

``make test`` prints this after its passes (also when one fails), so a suite that grows slow
shows at once. A test's time in JUnit is its setup, call and teardown; a cluster's bring-up
happens before the test that needed it (outside its timeout) and is recorded on that test as
the property ``fakegpu_bringup`` (``NAME=SECONDS``, ``fakegpu.testkit.session``).

    python -m fakegpu.testkit.costs reports/junit.xml reports/junit-kind.xml
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

BRINGUP_PROPERTY = "fakegpu_bringup"
EXIT_BAD_INPUT = 2


@dataclass
class FileCost:
    seconds: float = 0.0
    tests: int = 0


@dataclass
class RunCost:
    """One JUnit file: time per test file, and the bring-ups (cluster, seconds)."""

    files: dict[str, FileCost] = field(default_factory=dict)
    bringups: list[tuple[str, float]] = field(default_factory=list)


def file_of(classname: str) -> str:
    """``e2e.test_taints`` or ``e2e.test_taints.TestX`` -> ``e2e/test_taints.py``: the module is
    the last part that starts with ``test_`` (pytest's default), else the whole name."""
    parts = classname.split(".")
    for index in range(len(parts) - 1, -1, -1):
        if parts[index].startswith("test_") or parts[index].endswith("_test"):
            return "/".join(parts[: index + 1]) + ".py"
    return "/".join(parts) + ".py"


def read_run(path: Path) -> RunCost:
    """Parse one JUnit XML file; a file that is not JUnit XML raises ValueError naming it."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as err:
        raise ValueError(f"{path}: not a readable JUnit XML file ({err})") from None
    run = RunCost()
    for case in root.iter("testcase"):
        name = file_of(case.get("classname") or "")
        cost = run.files.setdefault(name, FileCost())
        try:
            cost.seconds += float(case.get("time") or 0.0)
        except ValueError:
            raise ValueError(f"{path}: testcase {case.get('name')}: time "
                             f"{case.get('time')!r} is not a number") from None
        cost.tests += 1
        for prop in case.iter("property"):
            if prop.get("name") == BRINGUP_PROPERTY:
                cluster, _, seconds = (prop.get("value") or "").rpartition("=")
                run.bringups.append((cluster, float(seconds)))
    return run


def table(paths: list[Path], top: int = 15) -> str:
    lines: list[str] = []
    for path in paths:
        run = read_run(path)
        total = sum(c.seconds for c in run.files.values())
        lines.append(f"{path}: {sum(c.tests for c in run.files.values())} tests, "
                     f"{total:.0f} s of test time (workers run side by side: wall time is less)")
        lines.append(f"  {'seconds':>8}  {'tests':>5}  slowest {top} test files")
        ranked = sorted(run.files.items(), key=lambda kv: kv[1].seconds, reverse=True)
        for name, cost in ranked[:top]:
            lines.append(f"  {cost.seconds:8.1f}  {cost.tests:5d}  {name}")
        for cluster, seconds in run.bringups:
            lines.append(f"  {seconds:8.1f}  {'':5}  bring-up of cluster {cluster}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakegpu.testkit.costs",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("junit", nargs="+", type=Path, help="JUnit XML files (missing: left out)")
    parser.add_argument("--top", type=int, default=15, help="test files per run (default 15)")
    args = parser.parse_args(argv)
    present = [p for p in args.junit if p.is_file()]  # a pass that never started wrote none
    try:
        print(table(present, args.top))
    except ValueError as err:
        print(f"fakegpu costs: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
