"""The on-disk cache of executables: one directory per component and version.

Layout (under ``paths.cache_dir()/bin``)::

    kubernetes-1.37.2/bin/{kube-apiserver,kubelet,...}
    kubernetes-1.37.2/manifest.json     # written last: its presence means "complete"
    .lock                               # serializes every writer
    .tmp-*/                             # an entry being filled; renamed into place when verified

An entry is only ever made visible by an atomic rename of a directory whose binaries were
already run with their version flag, so a reader never sees a half-built entry; an entry
without a valid manifest (a crash of an older layout, a hand edit) is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fakegpu import paths
from fakegpu.errors import FakegpuError

MANIFEST = "manifest.json"
MANIFEST_LAYOUT = 1


@dataclass(frozen=True)
class Probe:
    """How to make one executable print its version."""

    args: tuple[str, ...] = ("--version",)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Component:
    """A set of executables released, and cached, together under one version."""

    key: str  # "kubernetes", "etcd", ...
    version: str  # without a leading "v": "1.37.2"
    probes: Mapping[str, Probe]  # file name -> how to ask it its version

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(self.probes)

    @property
    def label(self) -> str:
        return f"{self.key} {self.version}"


def bin_root() -> Path:
    return paths.cache_dir() / "bin"


def entry_dir(component: Component) -> Path:
    return bin_root() / f"{component.key}-{component.version}"


def version_matches(output: str, version: str) -> bool:
    """Whether ``output`` names exactly ``version`` (1.37.2 matches v1.37.2, not 1.37.20)."""
    pattern = rf"(?<![\w.])v?{re.escape(version)}(?![\w.])"
    return re.search(pattern, output) is not None


def run_probe(path: Path, probe: Probe) -> str:
    """Run ``path`` with its version flag; return stdout+stderr (raise if it cannot run)."""
    # A clean environment: a stray CNI_COMMAND or KUBECONFIG must not change what runs.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir()}
    env.update(probe.env)
    try:
        out = subprocess.run(
            [str(path), *probe.args], capture_output=True, text=True, env=env,
            timeout=60, check=False, errors="replace",
        )
    except OSError as err:
        raise FakegpuError(f"cannot run {path}: {err.strerror or err}") from err
    except subprocess.TimeoutExpired as err:
        raise FakegpuError(f"`{path} {' '.join(probe.args)}` did not exit within 60 s") from err
    text = (out.stdout + out.stderr).strip()
    if out.returncode != 0:
        raise FakegpuError(
            f"`{path} {' '.join(probe.args)}` exited {out.returncode}: "
            f"{text.splitlines()[-1] if text else '(no output)'}"
        )
    return text


def check_versions(component: Component, directory: Path) -> dict[str, str]:
    """Run every executable of ``component`` in ``directory``; return name -> first output line.

    Raises FakegpuError naming the file when one does not report ``component.version``.
    """
    reported: dict[str, str] = {}
    for name, probe in component.probes.items():
        path = directory / name
        text = run_probe(path, probe)
        if not version_matches(text, component.version):
            first = text.splitlines()[0] if text else "(no output)"
            raise FakegpuError(f"{path} reports {first!r}, not version {component.version}")
        lines = text.splitlines()
        reported[name] = next(
            (line.strip() for line in lines if version_matches(line, component.version)), lines[0]
        )
    return reported


def load_manifest(component: Component) -> dict[str, Any] | None:
    """The manifest of a complete, intact cache entry for ``component``, else None.

    Cheap on purpose (a JSON read and a stat per file): this runs on every `ensure`.
    """
    root = entry_dir(component)
    try:
        data = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or (
        data.get("layout"), data.get("component"), data.get("version")
    ) != (MANIFEST_LAYOUT, component.key, component.version):
        return None
    files = data.get("files")
    if not isinstance(files, dict) or set(files) != set(component.files):
        return None
    for name, info in files.items():
        path = root / "bin" / name
        try:
            st = path.stat()
        except OSError:
            return None
        if not isinstance(info, dict) or st.st_size != info.get("size"):
            return None
        if not os.access(path, os.X_OK):
            return None
    return data


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install(component: Component, source: str, fill: Callable[[Path], object]) -> Path:
    """Fill a temporary entry via ``fill(bin_dir)``, verify it, and move it into place.

    The caller holds ``lock()``. Returns the entry's bin directory.
    """
    root = entry_dir(component)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{root.name}-", dir=root.parent))
    try:
        bindir = tmp / "bin"
        bindir.mkdir()
        started = time.monotonic()
        fill(bindir)
        missing = [n for n in component.files if not (bindir / n).is_file()]
        if missing:
            raise FakegpuError(f"{component.label}: {source} produced no {', '.join(missing)}")
        reported = check_versions(component, bindir)
        manifest = {
            "layout": MANIFEST_LAYOUT,
            "component": component.key,
            "version": component.version,
            "source": source,
            "seconds": round(time.monotonic() - started, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": {
                name: {
                    "size": (bindir / name).stat().st_size,
                    "sha256": _sha256(bindir / name),
                    "reports": reported[name],
                }
                for name in component.files
            },
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if root.exists():  # an invalid leftover: never merge into it
            shutil.rmtree(root)
        os.rename(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root / "bin"


def remove_stale_tmp() -> None:
    """Remove temporary entries of builds that died. Only call with ``lock()`` held."""
    for stale in bin_root().glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def lock(notify: Callable[[str], None] | None = None) -> Iterator[None]:
    """Serialize writers of the cache (other fakegpu processes, other threads)."""
    bin_root().mkdir(parents=True, exist_ok=True)
    path = bin_root() / ".lock"
    file_lock = FileLock(str(path))
    try:
        file_lock.acquire(timeout=0.2)
    except Timeout:
        if notify is not None:
            notify(f"waiting for another fakegpu that is filling the cache (lock {path})")
        file_lock.acquire()
    try:
        yield
    finally:
        file_lock.release()
