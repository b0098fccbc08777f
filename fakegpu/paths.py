"""Where fakegpu keeps things on the host. Read at call time, never at import time."""

from __future__ import annotations

import os
from pathlib import Path

# Bump when the layout of the cache changes: old caches are then ignored, never misread.
CACHE_LAYOUT = "v1"


def cache_dir() -> Path:
    """Versioned cache for slow builds (Kubernetes binaries, images): survives clones."""
    base = os.environ.get("FAKEGPU_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fakegpu"
    )
    return Path(base) / CACHE_LAYOUT


def repo_fixtures_dir() -> Path:
    """The fixtures shipped in the source tree (``fixtures/`` beside the package)."""
    return Path(__file__).resolve().parent.parent / "fixtures"


# The one default cluster topology (the talk's 4x4 mini GB200 rack), for every command and the
# pytest plugin alike.
DEFAULT_TOPOLOGY = "gb200-mini.yaml"


def default_topology() -> Path:
    return repo_fixtures_dir() / DEFAULT_TOPOLOGY
