"""The Node objects of a fleet's simulated nodes, and their scripted failure.

A simulated node is an ordinary Node object that no kubelet owns: KWOK manages it (the
annotation below selects it), keeps it Ready through its Lease and marks pods bound to it
Running. Stopping one takes it from KWOK and says NotReady at once, as a node whose kubelet
died ends up saying; starting it hands it back and KWOK makes it Ready again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client

from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors as kerrors
from fakegpu.topology.model import Node

# KWOK's conventions (its documentation's): the annotation KWOK is told to manage, and the
# taint that keeps workloads not meant for simulated nodes off them.
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
STOPPED_VALUE = "stopped"  # anything but MANAGED_VALUE: KWOK lets go of the node
TAINT_KEY = "kwok.x-k8s.io/node"
# fakegpu's own: selectors tell simulated nodes from real ones by it.
SIMULATED_LABEL = "fakegpu.dev/simulated"
SYSTEM_LABEL = "fakegpu.dev/system"
STOPPED_LABEL = "fakegpu.dev/stopped"  # set while stopped: the fleet publisher withdraws slices
KWOK_SELECTOR = f"{MANAGED_ANNOTATION}={MANAGED_VALUE}"
CREATE_WORKERS = 8
# What a simulated node offers besides its GPUs: enough for any test pod, like a big host.
CAPACITY = {"cpu": "128", "memory": "2Ti", "pods": "256", "ephemeral-storage": "10Ti"}


def _label_value(text: str) -> str:
    """A label value: alphanumerics, '-', '_', '.', at most 63, alphanumeric at both ends."""
    out = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63]
    return out.strip("-_.")


def node_object(node: Node) -> dict[str, Any]:
    """The Node object of a simulated topology node."""
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        SIMULATED_LABEL: "true",
    }
    if node.system:
        labels[SYSTEM_LABEL] = _label_value(node.system)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels,
                     "annotations": {MANAGED_ANNOTATION: MANAGED_VALUE}},
        "spec": {"taints": [{"key": TAINT_KEY, "value": MANAGED_VALUE,
                             "effect": "NoSchedule"}]},
        "status": {"capacity": dict(CAPACITY), "allocatable": dict(CAPACITY)},
    }


def create(api: client.ApiClient, nodes: Iterable[Node]) -> int:
    """Create the Node objects that do not exist yet; the count created."""
    core = client.CoreV1Api(api)
    have = {n["metadata"]["name"] for n in kubeapi.nodes(api)}
    todo = [n for n in nodes if n.name not in have]

    def one(node: Node) -> None:
        body = node_object(node)
        # The client takes plain dicts as well as its models (the shape the apiserver reads).
        core.create_node(cast(Any, body), _request_timeout=kubeapi.TIMEOUT_S)
        # The status of a create is ignored: capacity goes in through the status subresource.
        core.patch_node_status(node.name, {"status": body["status"]},
                               _request_timeout=kubeapi.TIMEOUT_S)

    # A few at a time: a thousand nodes are two thousand requests.
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        for done in [pool.submit(one, n) for n in todo]:
            done.result()
    return len(todo)


def stop(api: client.ApiClient, name: str) -> None:
    """Take the node from KWOK and mark it NotReady (its Lease then runs out too)."""
    core = client.CoreV1Api(api)
    core.patch_node(name, {"metadata": {"annotations": {MANAGED_ANNOTATION: STOPPED_VALUE},
                                        "labels": {STOPPED_LABEL: "true"}}},
                    _request_timeout=kubeapi.TIMEOUT_S)
    node = kubeapi.get_json(api, f"/api/v1/nodes/{name}")
    conditions = [c for c in (node.get("status") or {}).get("conditions") or []
                  if c.get("type") != "Ready"]
    conditions.append({"type": "Ready", "status": "False", "reason": "NodeStopped",
                       "message": "fakegpu cluster node stop: the simulated node is down"})
    core.patch_node_status(name, {"status": {"conditions": conditions}},
                           _request_timeout=kubeapi.TIMEOUT_S)


def start(api: client.ApiClient, name: str) -> None:
    """Hand the node back to KWOK, which makes it Ready again (its node-ready stage)."""
    client.CoreV1Api(api).patch_node(
        name, {"metadata": {"annotations": {MANAGED_ANNOTATION: MANAGED_VALUE},
                            "labels": {STOPPED_LABEL: None}}},
        _request_timeout=kubeapi.TIMEOUT_S)


def stopped(api: client.ApiClient) -> set[str]:
    """Names of the simulated nodes ``stop`` took down (a small list, by label)."""
    listed = kubeapi.get_json(api, f"/api/v1/nodes?labelSelector={STOPPED_LABEL}%3Dtrue")
    return {str(n["metadata"]["name"]) for n in listed.get("items") or []}


def delete(api: client.ApiClient, names: Sequence[str]) -> int:
    """Delete those of the Node objects that exist (their slices go with them: the Node owns
    them); the count deleted. A server that lists no Nodes is no Kubernetes apiserver and a
    refused delete is not a deleted node: both raise, once every name was tried."""
    try:
        listed = kerrors.call("cannot list Nodes", lambda: kubeapi.get_json(api, "/api/v1/nodes"))
    except ValueError:
        listed = None  # not JSON
    if not isinstance(listed, dict) or listed.get("kind") != "NodeList":
        raise kerrors.KubeError(f"{api.configuration.host} is no Kubernetes apiserver: "
                                "/api/v1/nodes answered no NodeList")
    have = {str(n["metadata"]["name"]) for n in listed.get("items") or []}
    core = client.CoreV1Api(api)
    deleted, refused = 0, []
    for name in (n for n in names if n in have):
        try:
            kerrors.call(f"cannot delete Node {name}", functools.partial(
                core.delete_node, name, _request_timeout=kubeapi.TIMEOUT_S))
        except kerrors.NotFound:
            continue  # gone since the list: not ours to count
        except kerrors.KubeError as err:
            refused.append(err)
            continue
        deleted += 1
    if refused:
        raise kerrors.KubeError(f"{deleted} simulated Node objects deleted, {len(refused)} "
                                f"not: {refused[0]}", refused[0].status)
    return deleted
