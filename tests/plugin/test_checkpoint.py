from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fakegpu.kubeletplugin import checkpoint
from fakegpu.kubeletplugin.checkpoint import PreparedClaim, PreparedDevice, Records


def _claim(uid: str) -> PreparedClaim:
    return PreparedClaim(uid=uid, namespace="ns", name=f"n-{uid}", cdi_spec=f"{uid}.json",
                         devices=(PreparedDevice(("r",), "node", "gpu-0", ("k/c=x",), "s1"),))


def _commit(records: Records, claim: PreparedClaim) -> None:
    records.commit(claim.uid, records.stage(claim))
    records.sync()


def test_one_record_per_claim_round_trip_and_no_temp_files_left(tmp_path: Path) -> None:
    records = Records(tmp_path)
    assert records.get("a") is None  # nothing written yet
    for uid in ("a", "b"):
        _commit(records, _claim(uid))
    assert records.all() == {"a": _claim("a"), "b": _claim("b")}
    assert sorted(p.name for p in records.dir.iterdir()) == ["a.json", "b.json"]
    assert json.loads((records.dir / "a.json").read_text())["version"] == checkpoint.VERSION
    assert records.remove("a") and not records.remove("a")
    assert records.get("a") is None and records.get("b") == _claim("b")


@pytest.mark.parametrize("content", [
    b"\xff\xfe not utf-8", b"{not json", b'{"version": 99, "claim": {}}', b"[]",
    b'{"version": 2, "claim": {"uid": "a"}}',
    json.dumps({"version": 2, "claim": {**_claim("other").to_json()}}).encode(),  # wrong file
])
def test_an_unreadable_record_is_moved_aside_and_the_claim_counts_as_unprepared(
        tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    records = Records(tmp_path)
    records.dir.mkdir()
    (records.dir / "a.json").write_bytes(content)
    assert records.get("a") is None  # a reader without the lock leaves it in place
    assert (records.dir / "a.json").read_bytes() == content
    with caplog.at_level(logging.ERROR):
        assert records.get("a", repair=True) is None
    [aside] = records.dir.glob("a.json.corrupt-*")
    assert aside.read_bytes() == content  # kept for a person to look at
    assert not (records.dir / "a.json").exists()
    [line] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "corrupt checkpoint" in line.getMessage() and aside.name in line.getMessage()
    _commit(records, _claim("a"))  # prepared again when the kubelet asks
    assert records.get("a") == _claim("a")


def test_the_single_file_checkpoint_of_earlier_versions_is_migrated(tmp_path: Path) -> None:
    # Exactly what the previous release wrote (checkpoint.save, version 1).
    old = {"version": 1, "claims": {uid: {
        "uid": uid, "namespace": "ns", "name": f"n-{uid}", "cdi_spec": f"{uid}.json",
        "instance": "pod-1", "devices": [{"request_names": ["r"], "pool_name": "node",
                                          "device_name": "gpu-0", "cdi_device_ids": ["k/c=x"],
                                          "share_id": "s1"}]} for uid in ("a", "b")}}
    (tmp_path / "checkpoint.json").write_text(json.dumps(old, indent=1, sort_keys=True))
    records = Records(tmp_path)
    records.recover()
    assert not (tmp_path / "checkpoint.json").exists()
    got = records.all()
    assert sorted(got) == ["a", "b"]
    assert got["a"].instance == "pod-1" and got["a"].devices == _claim("a").devices
    records.recover()  # nothing left to migrate: a no-op
    assert records.all() == got


@pytest.mark.parametrize("content", [b"\x80\x81 not utf-8", b"{not json",
                                     b'{"version": 7, "claims": {}}'])
def test_a_corrupt_old_checkpoint_is_moved_aside_and_the_node_starts_empty(
        tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "checkpoint.json").write_bytes(content)
    records = Records(tmp_path)
    with caplog.at_level(logging.ERROR):
        records.recover()
    [aside] = tmp_path.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == content
    assert records.all() == {}
    assert any("corrupt checkpoint" in r.getMessage() for r in caplog.records)


def test_recover_removes_what_killed_writers_left(tmp_path: Path) -> None:
    records = Records(tmp_path)
    records.dir.mkdir()
    leftovers = [tmp_path / ".checkpoint-k2j4h1.tmp",  # the previous release's temp name
                 records.dir / ".a.json.x81hd.tmp"]  # a record being staged
    for path in leftovers:
        path.write_text("{")
    _commit(records, _claim("b"))
    records.recover()
    assert not any(p.exists() for p in leftovers)
    assert records.get("b") == _claim("b")


def test_uids_that_are_not_safe_names_never_become_paths(tmp_path: Path) -> None:
    records = Records(tmp_path)
    for uid in ("../x", "a/b", "a\0b", ".hidden", ""):
        with pytest.raises(ValueError, match="claim UID"):
            records.path(uid)
