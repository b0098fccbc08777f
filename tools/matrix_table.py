"""The results table of `make test-matrix`: one row per minor, from its JUnit report.

    python tools/matrix_table.py reports/matrix 1.37 1.38
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def row(out: Path, minor: str) -> str:
    report = out / f"{minor}.xml"
    if not report.is_file():
        return f"| {minor} | not run | | | | |"
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    for case in ET.parse(report).iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
            failed.append(case.get("name", "?"))
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    seconds = out / f"{minor}.seconds"
    took = f"{int(seconds.read_text())} s" if seconds.is_file() else "?"
    return (f"| {minor} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | "
            f"{took} | {', '.join(failed)} |")


def main(argv: list[str]) -> int:
    out, minors = Path(argv[0]), argv[1:]
    print("| minor | passed | failed | skipped | time | failed tests |")
    print("|---|---|---|---|---|---|")
    for minor in minors:
        print(row(out, minor))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
