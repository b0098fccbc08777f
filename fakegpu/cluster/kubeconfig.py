"""Write kubeconfig files that point at credential files (never inline secrets in logs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from fakegpu import fsutil


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    cert: Path | None = None,
    key: Path | None = None,
    token_file: Path | None = None,
    cluster: str = "fakegpu",
    user: str = "admin",
) -> Path:
    """One cluster, one user, one current context; paths are absolute so the file can move.

    The user holds a client certificate (``cert`` and ``key``) or a bearer token (``token_file``).
    """
    creds: dict[str, str]
    if token_file is not None and cert is None and key is None:
        creds = {"tokenFile": str(token_file.resolve())}
    elif token_file is None and cert is not None and key is not None:
        creds = {"client-certificate": str(cert.resolve()), "client-key": str(key.resolve())}
    else:
        raise ValueError("a kubeconfig user needs cert and key, or token_file")
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server,
                                          "certificate-authority": str(ca.resolve())}}
        ],
        "users": [
            {"name": user, "user": creds}
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }
    return fsutil.atomic_write(path, yaml.safe_dump(doc, sort_keys=False), mode=0o600)
