"""KWOK, the engine that keeps a fleet's simulated nodes Ready and their pods Running.

Obtained like the other cluster binaries (binaries.py): a directory the user names
(FAKEGPU_BIN_DIR), else a build from the Go module proxy, cached per version under
``paths.cache_dir()/bin/kwok-<version>``. Only fleet topologies need it, so it is not part
of ``binaries.ensure``: a cluster of real nodes never builds it.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fakegpu.cluster.artifacts import binaries, bincache
from fakegpu.cluster.artifacts.binaries import Recipe
from fakegpu.cluster.artifacts.bincache import Component, Probe
from fakegpu.cluster.artifacts.gobuild import GoProgram, WrapperBuild

# The newest release the Go module proxy serves here (`go list -m -versions sigs.k8s.io/kwok`:
# v0.6.1 v0.7.0 v0.8.0). Its go.mod replaces nothing, so the wrapper build needs no pins.
KWOK_VERSION = "0.8.0"
MODULE = "sigs.k8s.io/kwok"


def recipe(version: str = KWOK_VERSION) -> Recipe:
    """How to obtain KWOK ``version``: a build only (no release download is pinned)."""
    comp = _component(version)

    def build() -> WrapperBuild:
        return WrapperBuild(what=f"kwok {version}", module=MODULE, version=f"v{version}",
                            programs=(GoProgram(f"{MODULE}/cmd/kwok", "kwok"),))

    return Recipe(comp, build, lambda _arch: [])


def cached(version: str = KWOK_VERSION) -> Path | None:
    """The kwok executable if it is in the cache, else None (never builds)."""
    comp = _component(version)
    if bincache.load_manifest(comp) is None:
        return None
    return bincache.entry_dir(comp) / "bin" / "kwok"


def _component(version: str) -> Component:
    # `kwok --version` prints "v0.8.0 go1.26.8 (linux/amd64)": the version is a constant
    # of the module (pkg/consts), so the build needs no ldflags for it.
    return Component("kwok", version, {"kwok": Probe(("--version",))})


def ensure(version: str = KWOK_VERSION, *, bin_dir: Path | None = None,
           console: Console | None = None) -> Path:
    """The kwok executable, built (with progress lines) when the cache lacks it."""
    found = cached(version)
    if found is not None:
        return found
    console = console or Console(stderr=True)
    rec = recipe(version)
    user = binaries._user_dir(bin_dir)
    with bincache.lock(notify=lambda m: binaries._say(console, m)):
        bincache.remove_stale_tmp()
        if bincache.load_manifest(rec.component) is None:  # another process may have built it
            binaries._obtain(rec, user, console, "[1/1]")
    path = cached(version)
    assert path is not None, "bincache.install verified the entry"
    return path
