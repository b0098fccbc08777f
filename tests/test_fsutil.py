"""The one atomic write: whole file or old file, no temp left behind, stale temps removable."""

import os
from pathlib import Path

import pytest

from fakegpu.fsutil import atomic_write, move_into_place, remove_stale_temps


def test_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state"
    atomic_write(target, b"old")
    atomic_write(target, "new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state"]


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state"
    atomic_write(target, b"old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_remove_stale_temps_only_touches_that_files_temps(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_bytes(b"x")
    stale = tmp_path / ".ckpt.abc123.tmp"
    stale.write_bytes(b"partial")
    other = tmp_path / ".other.abc.tmp"
    other.write_bytes(b"keep")
    assert remove_stale_temps(tmp_path, "ckpt") == [stale]
    assert other.exists() and (tmp_path / "ckpt").exists()


def test_move_into_place_publishes_another_programs_file(tmp_path: Path) -> None:
    made = tmp_path / "rootfs.tar.part"  # e.g. what tar wrote beside the target
    made.write_bytes(b"archive")
    (tmp_path / "rootfs.tar").write_bytes(b"old")
    assert move_into_place(made, tmp_path / "rootfs.tar") == tmp_path / "rootfs.tar"
    assert (tmp_path / "rootfs.tar").read_bytes() == b"archive"
    assert [p.name for p in tmp_path.iterdir()] == ["rootfs.tar"]
