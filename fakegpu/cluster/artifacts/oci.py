"""Write OCI image archives (an image layout in one tar), reproducibly, with the stdlib only.

Nothing can be pulled on a fakegpu host, so images are assembled here from files. Every
byte is a function of the inputs: entries sorted, mtimes 0, owner root with no names,
gzip without a timestamp or file name, JSON with sorted keys. The same inputs therefore
give the same digests, which makes the cache checkable and imports idempotent.

The archive holds an OCI layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) that
``ctr images import`` reads, naming the image from the ``io.containerd.image.name``
annotation, plus a Docker ``manifest.json`` so ``docker load`` accepts it too.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_IMAGE_NAME = "io.containerd.image.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Entry:
    """One file system entry of a layer: a file (``data``), a symlink (``link``) or a dir."""

    path: str  # relative, no leading "/": "bin/sh"
    mode: int = 0o644
    data: bytes | None = None
    link: str | None = None

    @property
    def is_dir(self) -> bool:
        return self.data is None and self.link is None


def file(path: str, data: bytes, mode: int = 0o644) -> Entry:
    return Entry(path.lstrip("/"), mode, data=data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path.lstrip("/"), 0o777, link=target)


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path.lstrip("/").rstrip("/"), mode)


def _tar_info(name: str, *, size: int = 0, mode: int = 0o644,
              kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.linkname = size, mode, kind, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """An uncompressed layer tar: parents implied, entries sorted, metadata normalized."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
        # Every parent directory gets its own entry, or runtimes create it with odd modes.
        parts = entry.path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            by_path.setdefault("/".join(parts[:i]), directory("/".join(parts[:i])))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(by_path):
            e = by_path[path]
            if e.is_dir:
                tar.addfile(_tar_info(path + "/", mode=e.mode, kind=tarfile.DIRTYPE))
            elif e.link is not None:
                tar.addfile(_tar_info(path, mode=e.mode, kind=tarfile.SYMTYPE, link=e.link))
            else:
                assert e.data is not None
                tar.addfile(_tar_info(path, size=len(e.data), mode=e.mode), io.BytesIO(e.data))
    return buf.getvalue()


def gzip_deterministic(data: bytes) -> bytes:
    """gzip with mtime 0 and no file name, so equal input gives equal output."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (what a container starts with)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    user: str = ""
    workdir: str = "/"


def build_archive(ref: str, layers: list[bytes], config: ImageConfig, *, arch: str) -> bytes:
    """The bytes of an OCI archive of one linux/``arch`` image named ``ref``.

    ``layers`` are uncompressed layer tars, lowest first.
    """
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> str:
        digest = sha256_digest(data)
        blobs[digest] = data
        return digest

    gz_layers = [gzip_deterministic(layer) for layer in layers]
    cfg: dict[str, Any] = {
        "architecture": arch,
        "os": "linux",
        "config": {
            k: v for k, v in {
                "Entrypoint": list(config.entrypoint), "Cmd": list(config.cmd),
                "Env": list(config.env), "User": config.user, "WorkingDir": config.workdir,
            }.items() if v
        },
        # diff_ids name the *uncompressed* layers; the manifest names the compressed blobs.
        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer) for layer in layers]},
        "history": [{"created_by": "fakegpu"} for _ in layers],
    }
    cfg_bytes = canonical_json(cfg)
    cfg_digest = add(cfg_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": [
            {"mediaType": MEDIA_LAYER_GZIP, "digest": add(gz), "size": len(gz)}
            for gz in gz_layers
        ],
    }
    man_bytes = canonical_json(manifest)
    man_digest = add(man_bytes)
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MEDIA_MANIFEST, "digest": man_digest, "size": len(man_bytes),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {ANNOTATION_IMAGE_NAME: ref, ANNOTATION_REF_NAME: tag},
        }],
    }
    docker_manifest = [{
        "Config": _blob_path(cfg_digest),
        "RepoTags": [ref],
        "Layers": [_blob_path(sha256_digest(gz)) for gz in gz_layers],
    }]
    files = {
        "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical_json(index),
        "manifest.json": canonical_json(docker_manifest),
        **{_blob_path(d): data for d, data in blobs.items()},
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs/", "blobs/sha256/"):
            tar.addfile(_tar_info(d, mode=0o755, kind=tarfile.DIRTYPE))
        for name in sorted(files):
            tar.addfile(_tar_info(name, size=len(files[name])), io.BytesIO(files[name]))
    return buf.getvalue()


def _blob_path(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


def manifest_digest(archive: Path) -> str:
    """The digest of the (single) image manifest an archive's index.json names."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive} has no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["digest"])
