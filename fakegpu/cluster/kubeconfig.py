"""Write kubeconfig files that point at certificate files (never inline secrets in logs)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    cert: Path,
    key: Path,
    cluster: str = "fakegpu",
    user: str = "admin",
) -> Path:
    """One cluster, one user, one current context; paths are absolute so the file can move."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server,
                                          "certificate-authority": str(ca.resolve())}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert.resolve()),
                                    "client-key": str(key.resolve())}}
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return path
