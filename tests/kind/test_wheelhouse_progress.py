"""The kind path's `pip wheel` of the tree takes one to two minutes: it says so before it
starts, shows a live line on a terminal, and says what it made (pip itself is run quiet)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fakegpu.cluster.kind import wheelhouse


@pytest.mark.parametrize("terminal", [False, True])
def test_pip_wheel_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    terminal: bool) -> None:
    out = tmp_path / "wheels"

    def pip(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        assert argv[1:4] == ["-m", "pip", "wheel"]
        (out / "fakegpu-1-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(wheelhouse.subprocess, "run", pip)
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=terminal, width=200)
    assert wheelhouse.build(out, console) == out
    lines = [line for line in shown.getvalue().splitlines() if "pip wheel: " in line]
    assert str(out) in lines[0] and "1-2 minutes" in lines[0]
    assert "pip wheel: done in " in lines[-1] and lines[-1].endswith("(1 wheel files)")
