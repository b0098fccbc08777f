"""The plugin image's Python side: fakegpu's wheel and its dependencies, made on this host.

From a source checkout, ``pip wheel`` of the tree (which compiles the library, nvidia-smi,
nvbandwidth and the stubs into fakegpu's wheel). From an installed wheel there is no tree: the
installed distribution is packed back into a wheel from the files its RECORD lists (the
compiled parts included, exactly as installed), and pip adds the dependencies beside it. So
``fakegpu kind image`` and the kind provider need nothing but the installed package.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path, PurePosixPath

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fakegpu import paths
from fakegpu.errors import FakegpuError, MissingPrerequisite

DIST = "fakegpu"
# What a checkout's wheel is made of besides the package directory (setup.py reads the rest).
_BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
# In the package directory, what a build makes (MANIFEST.in keeps it out of the sdist too):
# made again from the hashed sources, so it adds nothing to what the wheel is made of.
_BUILT_DIRS = ("nvml/lib/", "nvidiasmi/bin/", "bandwidth/bin/", "podresources/bin/")
_BUILT_SUFFIXES = (".pyc", ".so", "_pb2.py", "_pb2_grpc.py")
# What pip writes at install time and a wheel does not carry (RECORD is written anew).
_INSTALL_ONLY = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def problem() -> str | None:
    """Why no wheelhouse can be made here (checked before Docker starts), or None."""
    if paths.source_checkout() is not None:
        return None
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        return "fakegpu is neither a source checkout nor an installed distribution"
    if dist.files is None or dist.read_text("WHEEL") is None:
        return (f"the installed fakegpu {dist.version} has no RECORD or WHEEL file to build the "
                "plugin image from (reinstall it with pip)")
    return None


def source_digest() -> str:
    """A digest of what ``build`` would make fakegpu's wheel from, read in well under a second
    (``pip wheel`` of the tree takes 40-100 s here): the checkout's sources, or the installed
    distribution's RECORD (every installed file's hash). Equal digests, equal fakegpu wheel."""
    digest = hashlib.sha256()
    root = paths.source_checkout()
    if root is None:
        dist = metadata.distribution(DIST)
        digest.update(f"{dist.version}\n{dist.read_text('RECORD') or ''}".encode())
        return digest.hexdigest()
    package = root / DIST
    files = [root / name for name in _BUILD_FILES if (root / name).is_file()]
    files += sorted(f for f in package.rglob("*") if f.is_file() and _is_source(f, package))
    for f in files:
        digest.update(f"{f.relative_to(root)}\0{f.stat().st_size}\0".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _is_source(f: Path, package: Path) -> bool:
    rel = f.relative_to(package).as_posix()
    return ("__pycache__" not in f.parts and not f.name.endswith(_BUILT_SUFFIXES)
            and ".so." not in f.name and not rel.startswith(_BUILT_DIRS))


def build(out: Path, console: Console) -> Path:
    """fakegpu's wheel and every dependency's in ``out`` (created empty)."""
    why = problem()
    if why is not None:
        raise MissingPrerequisite(f"cannot build the plugin image: {why}")
    out.mkdir(parents=True)
    root = paths.source_checkout()
    source = str(root) if root is not None else str(repack(out))
    what = ("fakegpu's wheel from the source tree (compiles the NVML library and tools; "
            "1-2 minutes) and its dependencies'" if root is not None
            else "the dependencies' wheels beside the installed fakegpu's")
    _say(console, f"pip wheel: {what}, into {out}")
    started = time.monotonic()
    # A live line on a terminal only (pip is quiet for a minute or two); CI logs get the
    # plain lines around it.
    with Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        progress.add_task("pip wheel", total=None)
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir",
                              str(out), source], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise FakegpuError(f"pip wheel failed: {(res.stdout + res.stderr).strip()[-800:]}")
    _say(console, f"pip wheel: done in {time.monotonic() - started:.0f}s "
                  f"({len(list(out.glob('*.whl')))} wheel files)")
    return out


def _say(console: Console, message: str) -> None:
    # Plain text, one line even in a CI log: paths must stay copyable, never markup.
    console.print(message, soft_wrap=True, highlight=False, markup=False)


def _tags(wheel_file: str) -> str:
    tags = [line.split(":", 1)[1].strip() for line in wheel_file.splitlines()
            if line.startswith("Tag:")]
    if not tags:
        raise FakegpuError("the installed fakegpu's WHEEL file names no tag")
    # A compressed tag set (py3-none-a.b) is what the wheel file name carries.
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def repack(out: Path) -> Path:
    """The installed fakegpu as a wheel in ``out``: its files as installed, a fresh RECORD."""
    dist = metadata.distribution(DIST)
    wheel_file = dist.read_text("WHEEL") or ""
    name = f"{DIST}-{dist.version}-{_tags(wheel_file)}.whl"
    info = f"{DIST}-{dist.version}.dist-info"
    records: list[str] = []
    target = out / name
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for entry in sorted(dist.files or [], key=str):
            rel = PurePosixPath(str(entry))
            # Scripts live outside site-packages (../../bin): pip writes them from
            # entry_points.txt again. Byte code is made at install time.
            if ".." in rel.parts or "__pycache__" in rel.parts or rel.suffix == ".pyc":
                continue
            if rel.parent.name == info and rel.name in _INSTALL_ONLY:
                continue
            source = Path(str(entry.locate()))
            data = source.read_bytes()
            zf.write(source, str(rel))  # with its mode: nvidia-smi stays executable
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append(f"{rel},sha256={digest.decode()},{len(data)}")
        records.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return target
