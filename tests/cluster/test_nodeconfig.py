"""One renderer for both providers' node runtimes (fakegpu.cluster.nodeconfig): what embedded and
kind nodes share comes out the same, and only the provider's own values differ."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fakegpu.cluster import nodeconfig, runc_wrapper
from fakegpu.cluster.embedded import state
from fakegpu.cluster.embedded.node import render_cni_config, render_containerd_config
from fakegpu.cluster.kind import nodefiles

PAUSE = "registry.k8s.io/pause:3.10.2"
LAYOUT = state.node_layout("c1", Path("/var/lib/fakegpu/c1"), 3, 2, "gpu-node-2")
# What the renderers read of fakegpu.cluster.artifacts.binaries.Binaries.
BINS: Any = SimpleNamespace(runc=Path("/b/runc"), cni_bin_dir=Path("/b/cni"))


def _runtime(cfg: dict[str, object]) -> dict[str, object]:
    plugins = cfg["plugins"]
    assert isinstance(plugins, dict)
    runtime = plugins[nodeconfig.CRI_RUNTIME]
    assert isinstance(runtime, dict)
    return runtime


def test_both_providers_configure_containerd_alike() -> None:
    embedded = tomllib.loads(render_containerd_config(LAYOUT, BINS, PAUSE))
    kind = tomllib.loads(nodefiles.containerd_config(PAUSE))
    assert embedded["plugins"][nodeconfig.CRI_IMAGES] == kind["plugins"][nodeconfig.CRI_IMAGES]
    e, k = _runtime(embedded), _runtime(kind)
    assert e["enable_cdi"] is k["enable_cdi"] is True
    e_runc, k_runc = (r["containerd"]["runtimes"]["runc"] for r in (e, k))  # type: ignore[index]
    assert e_runc["runtime_type"] == k_runc["runtime_type"] == "io.containerd.runc.v2"
    # What differs is the provider's: cgroup driver, paths, the host-wide settings a node
    # sharing its host must keep to itself.
    assert (e_runc["options"]["SystemdCgroup"], k_runc["options"]["SystemdCgroup"]) == (False, True)
    assert "root" in embedded and "root" not in kind
    assert "netns_mounts_under_state_dir" in e and "netns_mounts_under_state_dir" not in k


def test_both_providers_use_one_cni_shape() -> None:
    embedded = json.loads(render_cni_config(LAYOUT))
    kind = json.loads(nodefiles.cni_conflist("10.244.1.0/24"))
    e_bridge, k_bridge = embedded["plugins"][0], kind["plugins"][0]
    assert set(e_bridge) == set(k_bridge)
    assert e_bridge["ipam"]["routes"] == k_bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0"}]
    assert (e_bridge["ipMasq"], k_bridge["ipMasq"]) == (False, True)


def test_the_wrapper_is_the_same_file_for_both(tmp_path: Path) -> None:
    """The embedded node's wrapper is runc_wrapper.py, as in kind nodes and our dockerd."""
    from fakegpu.cluster.embedded.node import write_runc_wrapper

    wrapper = write_runc_wrapper(tmp_path / "w", Path("/real/runc"))
    text = wrapper.read_text()
    assert text.startswith("#!/bin/sh\n")  # sh first: only create, run and exec start Python
    assert f'exec {sys.executable} -S "$0" "$@"' in text
    assert 'exec "${FAKEGPU_REAL_RUNC:-/real/runc}" "$@"' in text
    assert "REAL_RUNC = '/real/runc'" in text and "SECCOMP_SUPPORTED = False" in text
    source = Path(runc_wrapper.__file__).read_text()
    assert text == source.replace(
        'REAL_RUNC = "/usr/sbin/runc"  # replaced at install time', "REAL_RUNC = '/real/runc'"
    ).replace("SECCOMP_SUPPORTED = True  # replaced at install time", "SECCOMP_SUPPORTED = False"
    ).replace('exec /usr/bin/python3 "$0"', f'exec {sys.executable} -S "$0"'
    ).replace("FAKEGPU_REAL_RUNC:-/usr/sbin/runc}", "FAKEGPU_REAL_RUNC:-/real/runc}")
    assert wrapper.stat().st_mode & 0o755 == 0o755
