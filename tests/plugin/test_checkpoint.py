from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakegpu.plugin import checkpoint
from fakegpu.plugin.checkpoint import Checkpoint, CheckpointError, PreparedClaim, PreparedDevice


def _claim(uid: str) -> PreparedClaim:
    return PreparedClaim(uid=uid, namespace="ns", name=f"n-{uid}", cdi_spec=f"{uid}.json",
                         devices=(PreparedDevice(("r",), "node", "gpu-0", ("k/c=x",), "s1"),))


def test_round_trip_and_no_temp_files_left(tmp_path: Path) -> None:
    assert checkpoint.load(tmp_path).claims == {}  # nothing written yet
    state = Checkpoint({"a": _claim("a"), "b": _claim("b")})
    checkpoint.save(tmp_path, state)
    assert checkpoint.load(tmp_path) == state
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.json"]
    assert json.loads((tmp_path / "checkpoint.json").read_text())["version"] == checkpoint.VERSION


@pytest.mark.parametrize("content", ["{not json", '{"version": 99, "claims": {}}', "[]",
                                     '{"version": 1, "claims": {"a": {"uid": "a"}}}'])
def test_corrupt_checkpoint_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "checkpoint.json").write_text(content)
    with pytest.raises(CheckpointError, match=r"corrupt checkpoint .*checkpoint\.json"):
        checkpoint.load(tmp_path)
