"""Kubernetes objects read from YAML text, a YAML file or dicts, checked for what an apply
needs (``api.apply`` takes them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from fakegpu.errors import FakegpuError


def load_manifests(source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Objects from YAML text, a YAML file, one dict or several dicts (empty documents dropped)."""
    if isinstance(source, Path):
        docs: Iterable[Any] = list(yaml.safe_load_all(source.read_text()))
    elif isinstance(source, str):
        docs = list(yaml.safe_load_all(source))
    elif isinstance(source, Mapping):
        docs = [source]
    else:
        docs = list(source)
    objs = [dict(d) for d in docs if d]
    for obj in objs:
        if "apiVersion" not in obj or "kind" not in obj or "name" not in obj.get("metadata", {}):
            raise FakegpuError(f"manifest lacks apiVersion, kind or metadata.name: {obj!r:.200}")
    return objs
