"""Build the plugin image (the repository's Dockerfile) with the Docker at hand.

The Python side is a wheelhouse made on this host (``pip wheel`` of the source tree, which
compiles the fake libnvidia-ml.so.1 into fakegpu's wheel); the base is the slim Python image
where a registry answers, else the Debian base assembled by ``rootfs`` (no registry needed).
The tag is a digest of the wheelhouse, Dockerfile and base, so an unchanged tree is not
rebuilt and kind never runs a stale image under an old tag.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fakegpu.cluster.kind import rootfs
from fakegpu.cluster.process import run
from fakegpu.errors import FakegpuError, MissingPrerequisite

REGISTRY_BASE = "python:3.11-slim-bookworm"
IMAGE_REPO = "fakegpu.local/fakegpu-plugin"
BASE_ENV = "FAKEGPU_IMAGE_BASE"
WHEELHOUSE = Path("build") / "kind" / "wheelhouse"


@dataclass(frozen=True)
class PluginImage:
    ref: str
    base: str


# What this process has built, by (docker, version). A session's tree does not change under
# it, so its second and third kind cluster reuse the first one's image instead of running
# `pip wheel` of the tree again (resolving every dependency and compiling the NVML library:
# 104 s a cluster on the 2-core CI VM, 2026-11-30).
_built: dict[tuple[str, str], PluginImage] = {}


def source_root() -> Path:
    """The source tree holding the Dockerfile (images are built from a checkout only)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "Dockerfile").is_file() or not (root / "pyproject.toml").is_file():
        raise MissingPrerequisite(f"building the plugin image needs the fakegpu source tree "
                                  f"(no Dockerfile in {root})")
    return root


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


def build_wheelhouse(root: Path, console: Console) -> Path:
    """``pip wheel`` of the tree and its dependencies into build/kind/wheelhouse."""
    out = root / WHEELHOUSE
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    console.print(f"building wheels into {out}")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir",
                          str(out), str(root)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise FakegpuError(f"pip wheel failed: {(res.stdout + res.stderr).strip()[-800:]}")
    return out


def content_tag(root: Path, wheelhouse: Path, base: str) -> str:
    digest = hashlib.sha256(base.encode())
    digest.update((root / "Dockerfile").read_bytes())
    for whl in sorted(wheelhouse.iterdir()):
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
    """Build (or find) the plugin image; return its reference."""
    known = _built.get((str(docker), ""))
    if known is not None and rootfs.image_present(docker, known.ref):
        return known
    image = _build(docker, console or Console(stderr=True))
    _built[(str(docker), "")] = image
    return image


def _build(docker: Path, console: Console) -> PluginImage:
    root = source_root()
    base = choose_base(docker, console)
    wheels = build_wheelhouse(root, console)
    ref = f"{IMAGE_REPO}:{content_tag(root, wheels, base)}"
    if rootfs.image_present(docker, ref):
        return PluginImage(ref, base)
    console.print(f"building {ref} (base {base})")
    run([str(docker), "build", "--build-arg", f"BASE={base}", "-t", ref, str(root)],
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
