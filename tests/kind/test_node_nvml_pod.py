"""Which pod `fakegpu fault|smi --cluster C --node N` runs in on kind: the node's running
plugin pod, the newer one during a rolling update (the one the kubelet uses). No Docker needed."""

from __future__ import annotations

from typing import Any

from fakegpu.cluster.kind.provider import plugin_pod


def pod(name: str, node: str, phase: str = "Running", created: str = "2026-11-30T10:00:00Z",
        deleting: bool = False, container: str = "plugin") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": container}]},
            "status": {"phase": phase}}


def test_the_nodes_newest_running_plugin_pod() -> None:
    pods = [pod("old", "w1"), pod("new", "w1", created="2026-11-30T10:05:00Z"),
            pod("other", "w2", created="2026-11-30T12:00:00Z"),
            pod("starting", "w1", phase="Pending", created="2026-11-30T10:09:00Z")]
    assert plugin_pod(pods, "w1") == "new"
    assert plugin_pod(pods, "w2") == "other"
    assert plugin_pod([pod("going", "w1", deleting=True)], "w1") is None
    assert plugin_pod(pods, "w3") is None


def test_other_pods_of_the_namespace_are_not_the_plugin() -> None:
    """The compute-domain plugin and the IMEX daemons run in the plugin's namespace too."""
    pods = [pod("gpu", "w1"),
            pod("cd", "w1", created="2026-11-30T10:05:00Z", container="compute-domain-plugin"),
            pod("imex", "w1", created="2026-11-30T10:06:00Z", container="imex-daemon")]
    assert plugin_pod(pods, "w1") == "gpu"
    assert plugin_pod(pods[1:], "w1") is None
