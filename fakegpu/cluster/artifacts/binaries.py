"""The real executables a fakegpu cluster runs: Kubernetes, etcd, containerd, runc, CNI, crictl.

``ensure()`` returns them from the cache (``paths.cache_dir()/bin``), filling what is missing
in this order of preference:

1. a directory the user names (``bin_dir=`` or FAKEGPU_BIN_DIR): every binary of a component
   must be there and report exactly the pinned version; it is copied into the cache;
2. release downloads with published SHA-256 (FAKEGPU_DOWNLOAD_BASE, FAKEGPU_GITHUB_BASE),
   skipped within seconds when the host is offline;
3. a build from the Go module proxy (see gobuild.py), the one that works on an offline host.

A warm cache costs a JSON read and a stat per file: no probe, no go invocation.

Longer than most modules on purpose: one short recipe per component, with every pinned
version beside it, reads best in one place.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fakegpu import hostpkgs, paths
from fakegpu.cluster.artifacts import bincache, download
from fakegpu.cluster.artifacts.bincache import Component, Probe
from fakegpu.cluster.artifacts.gobuild import NEWER_TOOLCHAIN, Go, GoProgram, WrapperBuild
from fakegpu.errors import FakegpuError, InvalidInput, MissingPrerequisite

# Kubernetes minor -> the patch release fakegpu pins (the ones the Go proxy serves here).
SUPPORTED: dict[str, str] = {
    "1.34": "1.34.4",
    "1.35": "1.35.4",
    "1.36": "1.36.3",
    "1.37": "1.37.2",
    # A beta until the Go proxy serves 1.38.0; its go.mod needs Go 1.27 (see gobuild.py).
    "1.38": "1.38.0-beta.0",
}
# The newest GA minor: a beta is opt-in.
DEFAULT_MINOR = "1.37"

# One version of each node component serves every supported Kubernetes: building one set
# is what keeps a clean CI run short. Kubernetes 1.37's kubeadm pins etcd 3.7.0 for
# 1.34-1.37 alike; containerd 2.4.2 (CDI on by default) defaults its sandbox image to
# registry.k8s.io/pause:3.10.2, the same pause Kubernetes 1.37 names.
ETCD_VERSION = "3.7.3"
CONTAINERD_VERSION = "2.4.2"
RUNC_VERSION = "1.5.3"
CNI_PLUGINS_VERSION = "1.9.1"
CRICTL_VERSION = "1.37.0"

K8S_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "ptp", "firewall")

BIN_DIR_ENV = "FAKEGPU_BIN_DIR"

# Modules a Kubernetes minor imports that the Go proxy does not serve -> fakegpu's stand-in
# (standins/<name>/, each saying what it keeps of the real one). 1.38's kubelet imports
# sigs.k8s.io/iptables-wrappers (403 from the proxy) only for chains other components use.
_STANDINS_DIR = Path(__file__).resolve().parent / "standins"
K8S_STAND_INS: dict[str, dict[str, Path]] = {
    "38": {"sigs.k8s.io/iptables-wrappers": _STANDINS_DIR / "iptables-wrappers"},
}


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable a cluster needs (all inside the cache)."""

    k8s_version: str
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubelet: Path
    kubectl: Path
    etcd: Path
    containerd: Path
    containerd_shim_runc_v2: Path
    ctr: Path
    runc: Path
    crictl: Path
    cni_bin_dir: Path

    def paths(self) -> dict[str, Path]:
        """Every path by field name (for printing and for PATH-like uses)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "k8s_version"}


def resolve_version(version: str | None) -> str:
    """"1.37", "v1.37.2" or None (the default) -> the pinned patch release, e.g. "1.37.2"."""
    if version is None:
        return SUPPORTED[DEFAULT_MINOR]
    wanted = version.strip().removeprefix("v")
    if wanted in SUPPORTED:
        return SUPPORTED[wanted]
    if wanted in SUPPORTED.values():
        return wanted
    listed = ", ".join(f"{minor} ({patch})" for minor, patch in SUPPORTED.items())
    raise InvalidInput(f"Kubernetes version {version!r} is not supported; supported: {listed}")


@dataclass(frozen=True)
class Recipe:
    """A component and the ways to obtain it."""

    component: Component
    build: Callable[[], WrapperBuild]
    assets: Callable[[str], list[download.Asset]]  # arch -> release assets ([] = none)


def _arch() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if arch is None:
        raise MissingPrerequisite(f"fakegpu clusters need an amd64 or arm64 host, not {machine}")
    return arch


def _kubernetes(version: str) -> Recipe:
    # "1.38.0-beta.0": the patch keeps its pre-release suffix, which the staging modules share.
    major, minor, patch = version.split(".", 2)
    tag = f"v{version}"
    comp = Component(
        "kubernetes", version,
        {name: Probe(("version", "--client") if name == "kubectl" else ("--version",))
         for name in K8S_PROGRAMS},
    )

    def build() -> WrapperBuild:
        # Without these the binaries report v0.0.0 and the kubelet refuses to register.
        ldflags = [
            f"-X k8s.io/component-base/version.gitVersion={tag}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={tag}",
            f"-X k8s.io/client-go/pkg/version.gitMajor={major}",
            f"-X k8s.io/client-go/pkg/version.gitMinor={minor}",
        ]
        return WrapperBuild(
            what=f"kubernetes {version}", module="k8s.io/kubernetes", version=tag,
            programs=tuple(GoProgram(f"k8s.io/kubernetes/cmd/{n}", n) for n in K8S_PROGRAMS),
            # The staging modules are published as k8s.io/<name> v0.<minor>.<patch>.
            replace_local_with=f"v0.{minor}.{patch}",
            ldflags=tuple(ldflags),
            stand_ins=K8S_STAND_INS.get(minor, {}),
        )

    def assets(arch: str) -> list[download.Asset]:
        base = download.k8s_base()
        if base is None:
            return []
        return [
            download.Asset(url=u, sha256_url=u + ".sha256", name=n)
            for n in K8S_PROGRAMS
            for u in [f"{base}/release/{tag}/bin/linux/{arch}/{n}"]
        ]

    return Recipe(comp, build, assets)


def _etcd() -> Recipe:
    v = ETCD_VERSION
    comp = Component("etcd", v, {"etcd": Probe()})

    def build() -> WrapperBuild:
        # The etcd main package is the root of module go.etcd.io/etcd/server/v3 (its
        # main.go); its version string is a constant in go.etcd.io/etcd/api/v3/version.
        return WrapperBuild(
            what=f"etcd {v}", module="go.etcd.io/etcd/server/v3", version=f"v{v}",
            programs=(GoProgram("go.etcd.io/etcd/server/v3", "etcd"),),
            replace_local_with=f"v{v}",
        )

    def assets(arch: str) -> list[download.Asset]:
        gh = download.github_base()
        if gh is None:
            return []
        url = f"{gh}/etcd-io/etcd/releases/download/v{v}/etcd-v{v}-linux-{arch}.tar.gz"
        return [download.Asset(
            url=url, sha256_url=f"{gh}/etcd-io/etcd/releases/download/v{v}/SHA256SUMS",
            members={f"etcd-v{v}-linux-{arch}/etcd": "etcd"},
        )]

    return Recipe(comp, build, assets)


def _containerd() -> Recipe:
    v = CONTAINERD_VERSION
    comp = Component("containerd", v, {
        "containerd": Probe(), "containerd-shim-runc-v2": Probe(("-v",)), "ctr": Probe(),
    })
    names = ("containerd", "containerd-shim-runc-v2", "ctr")

    def build() -> WrapperBuild:
        mod = "github.com/containerd/containerd/v2"
        # CGO off: leaves out only the btrfs snapshotter, which a fakegpu node never uses.
        return WrapperBuild(
            what=f"containerd {v}", module=mod, version=f"v{v}",
            programs=tuple(GoProgram(f"{mod}/cmd/{n}", n) for n in names),
            ldflags=(f"-X {mod}/version.Version=v{v}", f"-X {mod}/version.Revision=fakegpu"),
            tags=("no_btrfs",),
        )

    def assets(arch: str) -> list[download.Asset]:
        gh = download.github_base()
        if gh is None:
            return []
        url = (f"{gh}/containerd/containerd/releases/download/v{v}/"
               f"containerd-{v}-linux-{arch}.tar.gz")
        return [download.Asset(url=url, sha256_url=url + ".sha256sum",
                               members={f"bin/{n}": n for n in names})]

    return Recipe(comp, build, assets)


def _runc() -> Recipe:
    v = RUNC_VERSION
    # Keyed apart from a plain runc: the kubelet asks for the RuntimeDefault seccomp profile on
    # every pod, so a runc that cannot apply seccomp would make pods behave unlike real ones.
    comp = Component("runc-seccomp", v, {"runc": Probe()})

    def build() -> WrapperBuild:
        # Static like upstream's release (netgo, osusergo, libseccomp linked in), so the binary
        # also runs inside kind node images. nsenter is C, seccomp needs libseccomp's headers
        # and static library: Debian's gcc, libc6-dev, libseccomp-dev and pkg-config.
        hostpkgs.ensure(("gcc", "libc6-dev", "libseccomp-dev", "pkg-config"),
                        why=f"building runc {v} with seccomp")
        return WrapperBuild(
            what=f"runc {v}", module="github.com/opencontainers/runc", version=f"v{v}",
            programs=(GoProgram("github.com/opencontainers/runc", "runc"),),
            ldflags=("-extldflags -static",),
            tags=("urfave_cli_no_docs", "netgo", "osusergo", "seccomp"),
            cgo=True,
        )

    def assets(arch: str) -> list[download.Asset]:
        gh = download.github_base()
        if gh is None:
            return []
        base = f"{gh}/opencontainers/runc/releases/download/v{v}"
        return [download.Asset(url=f"{base}/runc.{arch}", sha256_url=f"{base}/runc.sha256sum",
                               name="runc")]

    return Recipe(comp, build, assets)


def _cni() -> Recipe:
    v = CNI_PLUGINS_VERSION
    # A plugin run without CNI_COMMAND prints "CNI <name> plugin v1.9.1" and exits 0.
    comp = Component("cni-plugins", v, {n: Probe(args=()) for n in CNI_PLUGINS})
    where = {"bridge": "main", "loopback": "main", "ptp": "main", "host-local": "ipam",
             "portmap": "meta", "firewall": "meta"}

    def build() -> WrapperBuild:
        mod = "github.com/containernetworking/plugins"
        return WrapperBuild(
            what=f"CNI plugins {v}", module=mod, version=f"v{v}",
            programs=tuple(GoProgram(f"{mod}/plugins/{where[n]}/{n}", n) for n in CNI_PLUGINS),
            ldflags=(f"-X {mod}/pkg/utils/buildversion.BuildVersion=v{v}",),
        )

    def assets(arch: str) -> list[download.Asset]:
        gh = download.github_base()
        if gh is None:
            return []
        url = (f"{gh}/containernetworking/plugins/releases/download/v{v}/"
               f"cni-plugins-linux-{arch}-v{v}.tgz")
        return [download.Asset(url=url, sha256_url=url + ".sha256",
                               members={f"./{n}": n for n in CNI_PLUGINS})]

    return Recipe(comp, build, assets)


def _crictl() -> Recipe:
    v = CRICTL_VERSION
    comp = Component("crictl", v, {"crictl": Probe()})

    def build() -> WrapperBuild:
        return WrapperBuild(
            what=f"crictl {v}", module="sigs.k8s.io/cri-tools", version=f"v{v}",
            programs=(GoProgram("sigs.k8s.io/cri-tools/cmd/crictl", "crictl"),),
            ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version=v{v}",),
        )

    def assets(arch: str) -> list[download.Asset]:
        gh = download.github_base()
        if gh is None:
            return []
        url = (f"{gh}/kubernetes-sigs/cri-tools/releases/download/v{v}/"
               f"crictl-v{v}-linux-{arch}.tar.gz")
        return [download.Asset(url=url, sha256_url=url + ".sha256", members={"crictl": "crictl"})]

    return Recipe(comp, build, assets)


def recipes(k8s_version: str) -> list[Recipe]:
    """Everything a cluster of ``k8s_version`` needs, biggest build first."""
    return [_kubernetes(k8s_version), _etcd(), _containerd(), _runc(), _cni(), _crictl()]


def cached(k8s_version: str | None = None) -> Binaries | None:
    """The binaries if every one is already in the cache, else None (never builds)."""
    rs = recipes(resolve_version(k8s_version))
    if any(bincache.load_manifest(r.component) is None for r in rs):
        return None
    return _binaries(rs)


def is_cached(k8s_version: str | None = None) -> bool:
    """Whether ``ensure(k8s_version)`` would return at once (nothing to obtain)."""
    return cached(k8s_version) is not None


def ensure(
    version: str | None = None, *, bin_dir: Path | None = None, console: Console | None = None
) -> Binaries:
    """The binaries for Kubernetes ``version`` (default: newest supported), obtained if needed."""
    k8s = resolve_version(version)
    user = _user_dir(bin_dir)  # a bad name is an error even when nothing is missing
    rs = recipes(k8s)
    missing = [r for r in rs if bincache.load_manifest(r.component) is None]
    if not missing:
        return _binaries(rs)
    console = console or Console(stderr=True)
    with bincache.lock(notify=lambda m: _say(console, m)):
        bincache.remove_stale_tmp()
        # Another process may have filled some while we waited for the lock.
        missing = [r for r in missing if bincache.load_manifest(r.component) is None]
        for i, recipe in enumerate(missing, 1):
            _obtain(recipe, user, console, f"[{i}/{len(missing)}]")
    return _binaries(rs)


def _say(console: Console, message: str) -> None:
    # Plain text, one line even in a CI log: paths must stay copyable, never markup.
    console.print(message, soft_wrap=True, highlight=False, markup=False)


def _user_dir(bin_dir: Path | None) -> tuple[Path, str] | None:
    if bin_dir is not None:
        where, origin = Path(bin_dir), "--bin-dir"
    elif os.environ.get(BIN_DIR_ENV):
        where, origin = Path(os.environ[BIN_DIR_ENV]), BIN_DIR_ENV
    else:
        return None
    if not where.is_dir():
        raise InvalidInput(f"{origin} {where} is not a directory")
    return where.resolve(), origin


def _obtain(recipe: Recipe, user: tuple[Path, str] | None, console: Console, step: str) -> None:
    comp = recipe.component
    if user is not None and _from_user_dir(comp, *user, console, step):
        return
    if _from_download(recipe, console, step):
        return
    _from_build(recipe, console, step)


def _from_user_dir(comp: Component, where: Path, origin: str, console: Console, step: str) -> bool:
    present = [n for n in comp.files if (where / n).is_file()]
    if not present:
        return False
    if len(present) < len(comp.files):
        absent = ", ".join(n for n in comp.files if n not in present)
        _say(console, f"{step} {comp.label}: {where} lacks {absent}; not using it for {comp.key}")
        return False
    try:
        bincache.check_versions(comp, where)
    except FakegpuError as err:
        # The user named this directory for a reason: silently building instead would hide it.
        raise InvalidInput(f"{origin}: {err}") from err
    _say(console, f"{step} {comp.label}: copying from {where}")

    def fill(bindir: Path) -> None:
        for name in comp.files:
            shutil.copy2(where / name, bindir / name)

    bincache.install(comp, f"copied from {where}", fill)
    return True


def _from_download(recipe: Recipe, console: Console, step: str) -> bool:
    comp = recipe.component
    assets = recipe.assets(_arch())
    if not assets:
        return False
    base = assets[0].url.split("/")[0] + "//" + assets[0].url.split("/")[2]
    if not download.reachable(base):
        _say(console, f"{step} {comp.label}: {base} is unreachable; building instead")
        return False
    _say(console, f"{step} {comp.label}: downloading from {base}")

    def fill(bindir: Path) -> None:
        with tempfile.TemporaryDirectory(dir=bindir.parent) as work:
            for asset in assets:
                download.download(asset, bindir, Path(work))

    try:
        bincache.install(comp, f"downloaded from {base}", fill)
    except download.ChecksumMismatch:
        raise  # never fall back silently from a tampered or corrupt release
    except FakegpuError as err:
        _say(console, f"{step} {comp.label}: download failed ({err}); building instead")
        return False
    return True


def _from_build(recipe: Recipe, console: Console, step: str) -> None:
    comp = recipe.component
    go = Go.find()
    spec = recipe.build()
    workdir = paths.cache_dir() / "build" / f"{comp.key}-{comp.version}"
    # The toolchain is the host's unless the module's go.mod needs a newer one (gobuild.py);
    # the log says which was used.
    _say(console, f"{step} {comp.label}: building with {go.version()} (or {NEWER_TOOLCHAIN} if "
                  f"its go.mod needs it) from the Go module proxy (log: {workdir / 'build.log'})")
    started = time.monotonic()
    # A live line on a terminal only; CI logs get the plain lines around it.
    with Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                  TextColumn("{task.completed} packages compiled"), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"{step} {comp.label}", total=None)

        def on_line(line: str) -> None:
            # `go build -v` names each package as it compiles it: one line, no spaces.
            if line and " " not in line and not line.startswith("#"):
                progress.advance(task)

        bincache.install(comp, f"built with {go.version()} from the Go module proxy",
                         lambda bindir: go.build(spec, workdir, bindir, on_package=on_line))
    took = time.monotonic() - started
    _say(console, f"{step} {comp.label}: built in {int(took // 60)}m{int(took % 60):02d}s")


def _binaries(rs: list[Recipe]) -> Binaries:
    bins = {r.component.key: bincache.entry_dir(r.component) / "bin" for r in rs}
    k8s, containerd = bins["kubernetes"], bins["containerd"]
    return Binaries(
        k8s_version=rs[0].component.version,
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kubelet=k8s / "kubelet",
        kubectl=k8s / "kubectl",
        etcd=bins["etcd"] / "etcd",
        containerd=containerd / "containerd",
        containerd_shim_runc_v2=containerd / "containerd-shim-runc-v2",
        ctr=containerd / "ctr",
        runc=bins["runc-seccomp"] / "runc",
        crictl=bins["crictl"] / "crictl",
        cni_bin_dir=bins["cni-plugins"],
    )
