"""Build the plugin image (the package's Dockerfile) with the Docker at hand.

The build context is staged in a scratch directory: the Dockerfile (package data; the root
Dockerfile in a checkout) and a wheelhouse made on this host (``wheelhouse.build``: from the
tree in a checkout, from the installed package otherwise), so a wheel install builds the same
image. The base is the slim Python image where a registry answers, else the Debian base
assembled by ``rootfs`` (no registry needed). The tag is a digest of the wheelhouse, Dockerfile
and base, so kind never runs a stale image under an old tag; which tag a source state made is
remembered in the cache, so an unchanged tree is not even packed again (``build``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from rich.console import Console

from fakegpu import paths
from fakegpu.cluster.kind import rootfs, wheelhouse
from fakegpu.cluster.process import run
from fakegpu.errors import MissingPrerequisite
from fakegpu.fsutil import atomic_write

REGISTRY_BASE = "python:3.11-slim-bookworm"
IMAGE_REPO = "fakegpu.local/fakegpu-plugin"
BASE_ENV = "FAKEGPU_IMAGE_BASE"
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile"
WHEELHOUSE = "wheelhouse"  # in the staged context (the Dockerfile's WHEELHOUSE build arg)


@dataclass(frozen=True)
class PluginImage:
    ref: str
    base: str


def check_inputs() -> None:
    """Fail in one line, before Docker starts, when the image cannot be built from here."""
    if not DOCKERFILE.is_file():
        raise MissingPrerequisite(f"cannot build the plugin image: {DOCKERFILE} is missing "
                                  "(reinstall fakegpu)")
    why = wheelhouse.problem()
    if why is not None:
        raise MissingPrerequisite(f"cannot build the plugin image: {why}")


def registry_reachable(timeout: float = 5.0) -> bool:
    """Whether Docker Hub's registry answers (401 without a token is an answer)."""
    try:
        urllib.request.urlopen("https://registry-1.docker.io/v2/", timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def choose_base(docker: Path, console: Console) -> str:
    """$FAKEGPU_IMAGE_BASE, else the slim Python image if present or pullable, else ours."""
    if os.environ.get(BASE_ENV):
        return os.environ[BASE_ENV]
    if rootfs.image_present(docker, REGISTRY_BASE):
        return REGISTRY_BASE
    if registry_reachable():
        res = subprocess.run([str(docker), "pull", REGISTRY_BASE], check=False)
        if res.returncode == 0:
            return REGISTRY_BASE
        console.print(f"pulling {REGISTRY_BASE} failed; using a local Debian base")
    return rootfs.ensure_image(docker, rootfs.BASE, console)


def content_tag(wheels: Path, base: str) -> str:
    digest = hashlib.sha256(base.encode())
    digest.update(DOCKERFILE.read_bytes())
    for whl in sorted(wheels.iterdir()):
        digest.update(whl.name.encode())
        # fakegpu's own wheel embeds build times; hash what it contains, not its zip bytes.
        digest.update(_wheel_content(whl) if whl.name.startswith("fakegpu-") else b"")
    return digest.hexdigest()[:12]


def _wheel_content(whl: Path) -> bytes:
    import zipfile

    digest = hashlib.sha256()
    with zipfile.ZipFile(whl) as zf:
        for name in sorted(zf.namelist()):
            digest.update(name.encode())
            digest.update(zf.read(name))
    return digest.digest()


def build(docker: Path, console: Console | None = None) -> PluginImage:
    """Build (or find) the plugin image; return its reference.

    Which image a source state made is remembered in the cache (``plugin-images/<key>``, the
    key a digest of the base, the Dockerfile and ``wheelhouse.source_digest``), so every later
    kind cluster of an unchanged tree, in any process (each xdist worker, each ``cluster up``),
    loads that image instead of running ``pip wheel`` of the tree again (40-100 s on the 2-core
    CI VM). The dependencies' wheels are those resolved at that build: a tree change, or
    removing the image, resolves them again.
    """
    console = console or Console(stderr=True)
    memos = paths.cache_dir() / "kind" / "plugin-images"
    memos.mkdir(parents=True, exist_ok=True)
    # One build at a time across processes (xdist workers): the second finds the first's memo.
    with FileLock(str(memos.parent / "plugin-image.lock")):
        check_inputs()
        base = choose_base(docker, console)
        key = source_key(base)
        memo = memos / key
        known = memo.read_text().strip() if memo.is_file() else ""
        if known and rootfs.image_present(docker, known):
            return PluginImage(known, base)
        built = _build(docker, console, base)
        for stale in memos.iterdir():
            if stale.name != key:
                stale.unlink(missing_ok=True)  # their images went with _remove_older
        atomic_write(memo, built.ref + "\n")
    return built


def source_key(base: str) -> str:
    """What the image is made of, without making it: the base, the Dockerfile, the sources."""
    digest = hashlib.sha256(f"{base}\0".encode())
    digest.update(DOCKERFILE.read_bytes())
    digest.update(wheelhouse.source_digest().encode())
    return digest.hexdigest()[:24]


def _build(docker: Path, console: Console, base: str) -> PluginImage:
    scratch = paths.cache_dir() / "kind"
    with tempfile.TemporaryDirectory(prefix="plugin-image-", dir=scratch) as tmp:
        context = Path(tmp)
        shutil.copyfile(DOCKERFILE, context / "Dockerfile")  # a copy: Docker follows no link
        wheels = wheelhouse.build(context / WHEELHOUSE, console)
        ref = f"{IMAGE_REPO}:{content_tag(wheels, base)}"
        if rootfs.image_present(docker, ref):
            return PluginImage(ref, base)
        console.print(f"building {ref} (base {base})")
        run([str(docker), "build", "--build-arg", f"BASE={base}", "--build-arg",
             f"WHEELHOUSE={WHEELHOUSE}", "-t", ref, str(context)],
            timeout=1200, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    _remove_older(docker, ref)
    return PluginImage(ref, base)


def stamped(docker: Path, base_ref: str, version: str) -> str:
    """``base_ref`` (a plugin image built from this tree) with the version stamp ``version``:
    one layer on top, tagged ``<content>-<version>``; the tree is not built again."""
    repo, tag = base_ref.rsplit(":", 1)
    ref = f"{repo}:{tag.split('-', 1)[0]}-{version}"
    if rootfs.image_present(docker, ref):
        return ref
    dockerfile = (f"FROM {base_ref}\nUSER 0:0\n"
                  f"RUN echo '{version}' > /opt/fakegpu/VERSION\nUSER 65532:65532\n")
    run([str(docker), "build", "-t", ref, "-"], input_text=dockerfile, timeout=600,
        env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return ref


def _remove_older(docker: Path, keep: str) -> None:
    """Drop earlier builds of the plugin image (each tree change makes a new tag; clusters hold
    their own copy, loaded into the nodes) and the dangling install stages they leave."""
    listed = run([str(docker), "images", "--format", "{{.Repository}}:{{.Tag}}",
                  IMAGE_REPO], check=False).stdout.split()
    old = [r for r in listed if r != keep]
    if old:
        run([str(docker), "rmi", *old], check=False)
    # Only ours (labelled in the Dockerfile): never another dangling image of the user's.
    run([str(docker), "image", "prune", "-f", "--filter", "label=dev.fakegpu.stage=install"],
        check=False)
