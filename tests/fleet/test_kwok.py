"""KWOK is obtained like the other cluster binaries: from a directory the user names, else a
build from the Go module proxy; cached per version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakegpu.cluster.artifacts import binaries, kwok
from fakegpu.errors import InvalidInput


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)


def _fake_kwok(where: Path, version: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "kwok"
    exe.write_text(f"#!/bin/sh\necho 'kwok version v{version} go1.26.8 (linux/amd64)'\n")
    exe.chmod(0o755)
    return where


def test_the_recipe_builds_kwok_from_its_module() -> None:
    rec = kwok.recipe()
    build = rec.build()
    assert (build.module, build.version) == ("sigs.k8s.io/kwok", f"v{kwok.KWOK_VERSION}")
    assert [(p.package, p.name) for p in build.programs] == [("sigs.k8s.io/kwok/cmd/kwok",
                                                              "kwok")]
    assert rec.assets("amd64") == []  # no release download is pinned: a build or a user dir


def test_a_user_dir_fills_the_cache_once(tmp_path: Path) -> None:
    assert kwok.cached() is None
    user = _fake_kwok(tmp_path / "mine", kwok.KWOK_VERSION)
    path = kwok.ensure(bin_dir=user)
    assert path == kwok.cached()
    assert path.read_text() == (user / "kwok").read_text()
    assert "kwok-" + kwok.KWOK_VERSION in str(path)
    (user / "kwok").unlink()
    assert kwok.ensure(bin_dir=user) == path  # cached: the directory is not read again


def test_a_user_dir_with_another_version_is_refused(tmp_path: Path) -> None:
    user = _fake_kwok(tmp_path / "old", "0.6.1")
    with pytest.raises(InvalidInput, match=re.escape(f"not version {kwok.KWOK_VERSION}")):
        kwok.ensure(bin_dir=user)
