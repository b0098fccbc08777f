"""The kubelet gRPC APIs: our .proto files and the stubs grpcio-tools makes from them.

Stubs are built by setup.py and never committed. A source checkout that was not built
(or whose protos changed) gets them generated here, on first import, into this directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import build as _build


def _ensure_stubs() -> None:
    here = Path(__file__).resolve().parent
    if _build.proto_files() and _build.is_stale(here) and os.access(here, os.W_OK):
        _build.generate(here)


_ensure_stubs()
