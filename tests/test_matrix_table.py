"""tools/matrix_table.py: the results table `make test-matrix` writes, from JUnit reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "matrix_table.py"

REPORT = """<testsuites><testsuite>
<testcase classname="e2e.a" name="test_ok" time="1"/>
<testcase classname="e2e.a" name="test_bad" time="1"><failure message="x"/></testcase>
<testcase classname="e2e.a" name="test_err" time="1"><error message="x"/></testcase>
<testcase classname="e2e.a" name="test_skip" time="0"><skipped message="y"/></testcase>
</testsuite></testsuites>"""


def test_one_row_per_minor_with_counts_time_and_failures(tmp_path: Path) -> None:
    (tmp_path / "1.37.xml").write_text(REPORT)
    (tmp_path / "1.37.seconds").write_text("412\n")
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "1.37", "1.36"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == "| 1.37 | 1 | 2 | 1 | 412 s | test_bad, test_err |"
    assert out[3] == "| 1.36 | not run | | | | |"
