"""The host tools the kind provider and its tests need, built from the Go module proxy.

kind, helm and actionlint, plus kubeadm and kube-proxy (which kind nodes need and the embedded
cluster does not), are cached exactly like the cluster binaries: through ``bincache`` (one
directory per component and version, verified by running it, made visible by a rename) and
built by ``gobuild`` through a wrapper module. Nothing here duplicates ``binaries.py``: the
Kubernetes recipe is taken from it and only its program list is changed, so kubeadm and
kube-proxy get the same ldflags and reuse the Go build cache of the other binaries.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from fakegpu import paths
from fakegpu.cluster.artifacts import binaries, bincache
from fakegpu.cluster.artifacts.bincache import Component, Probe
from fakegpu.cluster.artifacts.gobuild import Go, GoProgram, WrapperBuild

KIND_VERSION = "0.33.0"
HELM_VERSION = "3.22.0"
ACTIONLINT_VERSION = "1.7.12"
NODE_K8S_PROGRAMS = ("kubeadm", "kube-proxy")


@dataclasses.dataclass(frozen=True)
class Tool:
    component: Component
    build: Callable[[], WrapperBuild]


def kind() -> Tool:
    v = KIND_VERSION
    return Tool(Component("kind", v, {"kind": Probe(("version",))}), lambda: WrapperBuild(
        what=f"kind {v}", module="sigs.k8s.io/kind", version=f"v{v}",
        programs=(GoProgram("sigs.k8s.io/kind", "kind"),),
    ))


def helm() -> Tool:
    v = HELM_VERSION
    mod = "helm.sh/helm/v3"
    return Tool(Component("helm", v, {"helm": Probe(("version", "--short"))}), lambda: WrapperBuild(
        what=f"helm {v}", module=mod, version=f"v{v}",
        programs=(GoProgram(f"{mod}/cmd/helm", "helm"),),
        # Without it helm reports the minor its source was cut from, not the release.
        ldflags=(f"-X {mod}/internal/version.version=v{v}",),
    ))


def actionlint() -> Tool:
    v = ACTIONLINT_VERSION
    mod = "github.com/rhysd/actionlint"
    return Tool(Component("actionlint", v, {"actionlint": Probe(("-version",))}),
                lambda: WrapperBuild(
        what=f"actionlint {v}", module=mod, version=f"v{v}",
        programs=(GoProgram(f"{mod}/cmd/actionlint", "actionlint"),),
        # Built through a wrapper module its build info says "(devel)": name the version.
        ldflags=(f"-X {mod}.version={v}",),
    ))


def node_kubernetes(k8s_version: str | None) -> Tool:
    """kubeadm and kube-proxy of the pinned release (kind nodes run kubeadm; kube-proxy runs
    as a pod there). The recipe is binaries.py's own, with only the program list changed."""
    version = binaries.resolve_version(k8s_version)
    probes = {"kubeadm": Probe(("version", "-o", "short")), "kube-proxy": Probe()}

    def build() -> WrapperBuild:
        spec = binaries._kubernetes(version).build()
        return dataclasses.replace(
            spec, what=f"kubeadm+kube-proxy {version}",
            programs=tuple(GoProgram(f"k8s.io/kubernetes/cmd/{n}", n) for n in NODE_K8S_PROGRAMS))

    return Tool(Component("kubernetes-node", version, probes), build)


def cached(tool: Tool) -> Path | None:
    """The tool's bin directory if it is in the cache (never builds)."""
    if bincache.load_manifest(tool.component) is None:
        return None
    return bincache.entry_dir(tool.component) / "bin"


def ensure(tool: Tool, console: Console | None = None) -> Path:
    """The tool's bin directory, building it from the Go module proxy when not cached."""
    found = cached(tool)
    if found is not None:
        return found
    console = console or Console(stderr=True)
    comp = tool.component
    with bincache.lock(notify=console.print):
        if bincache.load_manifest(comp) is None:
            go = Go.find()
            workdir = paths.cache_dir() / "build" / f"{comp.key}-{comp.version}"
            console.print(f"{comp.label}: building with {go.version()} from the Go module proxy "
                          f"(log: {workdir / 'build.log'})")
            started = time.monotonic()
            bincache.install(comp, f"built with {go.version()} from the Go module proxy",
                             lambda bindir: go.build(tool.build(), workdir, bindir))
            took = time.monotonic() - started
            console.print(f"{comp.label}: built in {int(took // 60)}m{int(took % 60):02d}s")
    return bincache.entry_dir(comp) / "bin"


def executable(tool: Tool, console: Console | None = None) -> Path:
    """The path of the tool's (single, or first) executable."""
    return ensure(tool, console) / tool.component.files[0]
