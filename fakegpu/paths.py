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


def source_checkout() -> Path | None:
    """The source tree fakegpu runs from (a git checkout, installed editable), else None: an
    installed wheel never rebuilds what it carries and never looks for the tree."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None
