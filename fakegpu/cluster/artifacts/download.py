"""Released binaries fetched over HTTP(S), each checked against its published SHA-256.

Where the internet (or a mirror) is reachable this is far faster than building. Reachability
is probed once per base URL with a short timeout, so an offline host falls through to the
Go build in a few seconds instead of waiting on every file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import FakegpuError

PROBE_TIMEOUT_S = 3.0
FETCH_TIMEOUT_S = 60.0
DEFAULT_K8S_BASE = "https://dl.k8s.io"
DEFAULT_GITHUB_BASE = "https://github.com"

_reachable: dict[str, bool] = {}


class ChecksumMismatch(FakegpuError):
    """A downloaded file does not match its published digest: never use it."""


def k8s_base() -> str | None:
    """Base URL of Kubernetes releases (FAKEGPU_DOWNLOAD_BASE); None when set to "off"."""
    return _base("FAKEGPU_DOWNLOAD_BASE", DEFAULT_K8S_BASE)


def github_base() -> str | None:
    """Base URL of GitHub releases (FAKEGPU_GITHUB_BASE); None when set to "off"."""
    return _base("FAKEGPU_GITHUB_BASE", DEFAULT_GITHUB_BASE)


def _base(var: str, default: str) -> str | None:
    value = os.environ.get(var, default).strip().rstrip("/")
    return None if value.lower() in ("", "off", "none", "0") else value


def reachable(base: str) -> bool:
    """Whether ``base`` answers at all within PROBE_TIMEOUT_S (any HTTP status counts)."""
    if base not in _reachable:
        try:
            req = urllib.request.Request(base + "/", method="HEAD")
            with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S):
                pass
            _reachable[base] = True
        except urllib.error.HTTPError:
            _reachable[base] = True  # it answered; the files may still exist
        except (OSError, ValueError):
            _reachable[base] = False
    return _reachable[base]


@dataclass(frozen=True)
class Asset:
    """One released file, where its checksum is published, and what to take out of it.

    ``members`` maps a path inside a tar archive to the executable name it is stored
    under; empty means the asset itself is the executable named ``name``.
    """

    url: str
    sha256_url: str
    name: str = ""
    members: Mapping[str, str] | None = None


def fetch(url: str, dest: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp, dest.open("wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except (OSError, ValueError) as err:
        raise FakegpuError(f"download of {url} failed: {err}") from err


def expected_sha256(text: str, asset_name: str) -> str:
    """The digest for ``asset_name`` in a checksum file: a bare digest or `sha256sum` lines."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) == 1:
        return lines[0][0].lower()
    for fields in lines:
        if len(fields) >= 2 and os.path.basename(fields[1].lstrip("*")) == asset_name:
            return fields[0].lower()
    raise FakegpuError(f"no checksum for {asset_name} in the published checksum file")


def download(asset: Asset, bindir: Path, workdir: Path) -> None:
    """Fetch ``asset``, verify its SHA-256, and put its executables into ``bindir``."""
    asset_name = asset.url.rsplit("/", 1)[-1]
    local = workdir / asset_name
    sums = workdir / (asset_name + ".sha256")
    fetch(asset.sha256_url, sums)
    fetch(asset.url, local)
    want = expected_sha256(sums.read_text(errors="replace"), asset_name)
    digest = hashlib.sha256()
    with local.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != want:
        raise ChecksumMismatch(
            f"checksum mismatch for {asset.url}: got {digest.hexdigest()}, published {want}"
        )
    if not asset.members:
        target = bindir / (asset.name or asset_name)
        shutil.move(local, target)
        target.chmod(0o755)
        return
    with tarfile.open(local) as tar:
        for member, name in asset.members.items():
            try:
                src = tar.extractfile(member)
            except KeyError:
                src = None
            if src is None:
                raise FakegpuError(f"{asset.url} has no file {member}")
            with src, (bindir / name).open("wb") as out:
                shutil.copyfileobj(src, out)
            (bindir / name).chmod(0o755)
