"""Registration and ResourceSlices: what the driver publishes, read from the API only."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube.errors import KubeError
from fakegpu.kube.resource import GROUP
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi
from fakegpu.testkit.wait import NotYet, wait_for

from . import kubelet
from .target import Target


def _node_names(core: kclient.CoreV1Api) -> set[str]:
    listed: Any = core.list_node().items
    return {str(n.metadata.name) for n in listed}


def _node_local(rapi: ResourceApi, target: Target) -> list[dict[str, Any]]:
    slices = rapi.slices(target.driver)
    assert slices, f"driver {target.driver} publishes no ResourceSlices (not registered?)"
    return slices


def test_slices_one_pool_per_node(target: Target, rapi: ResourceApi,
                                  core: kclient.CoreV1Api) -> None:
    nodes = _node_names(core)

    def consistent() -> dict[str, str]:
        slices = _node_local(rapi, target)
        problems: list[str] = []
        pool_node: dict[str, str] = {}
        node_pools: dict[str, set[str]] = {}
        for s in slices:
            spec = s["spec"]
            pool, node = spec["pool"]["name"], spec.get("nodeName")
            if not node:
                problems.append(f"slice {s['metadata']['name']} has no nodeName")
                continue
            if node not in nodes:
                problems.append(f"slice {s['metadata']['name']} names unknown node {node}")
            if pool_node.setdefault(pool, node) != node:
                problems.append(f"pool {pool} spans nodes {pool_node[pool]} and {node}")
            node_pools.setdefault(node, set()).add(pool)
        for node, pools in node_pools.items():
            if len(pools) != 1:
                problems.append(f"node {node} has pools {sorted(pools)}, not one")
        for pool in pool_node:
            mine = [s for s in slices if s["spec"]["pool"]["name"] == pool]
            newest = max(int(s["spec"]["pool"]["generation"]) for s in mine)
            current = [s for s in mine if int(s["spec"]["pool"]["generation"]) == newest]
            counts = {int(s["spec"]["pool"]["resourceSliceCount"]) for s in current}
            if counts != {len(current)}:
                problems.append(f"pool {pool} generation {newest}: {len(current)} slice(s), "
                                f"resourceSliceCount {sorted(counts)}")
            names = [d["name"] for s in current for d in s["spec"].get("devices") or ()]
            if len(names) != len(set(names)):
                problems.append(f"pool {pool} publishes a device name twice")
        if problems:  # a pool being republished settles; a real fault stays
            raise NotYet("; ".join(problems))
        return {node: next(iter(p)) for node, p in node_pools.items()}

    pools = wait_for(consistent, what=f"{target.driver}'s slices to be consistent", timeout=60)
    assert pools, "no node has a pool"


def test_driver_registered_with_kubelet(target: Target, rapi: ResourceApi, kube: Any) -> None:
    # The nodes the driver publishes devices for must each have it registered with their
    # kubelet, as the kubelet itself reports it: slices alone can be written by anyone.
    nodes = sorted({str(s["spec"].get("nodeName")) for s in _node_local(rapi, target)
                    if s["spec"].get("nodeName")})
    assert nodes, f"driver {target.driver} publishes no node-local ResourceSlices"

    def registered() -> None:
        problems = []
        for node in nodes:
            try:
                metrics = kubeapi.kubelet_metrics(kube, node)
            except kubeapi.ERRORS as err:
                first = (str(err).splitlines() or [type(err).__name__])[0]
                problems.append(f"node {node}: its kubelet's /metrics cannot be read through "
                                f"the API server's node proxy (needs get on nodes/proxy): "
                                f"{first}")
                continue
            problem = kubelet.registration_problem(target.driver, node, metrics)
            if problem is not None:
                problems.append(problem)
        if problems:  # a plugin that just started registers within seconds
            raise NotYet("; ".join(problems))

    wait_for(registered, what=f"the kubelets to report {target.driver} registered", timeout=60)


def test_slices_owned_by_node(target: Target, rapi: ResourceApi,
                              core: kclient.CoreV1Api) -> None:
    listed: Any = core.list_node().items
    uids = {n.metadata.name: n.metadata.uid for n in listed}
    for s in _node_local(rapi, target):
        node = s["spec"].get("nodeName")
        owners = [o for o in s["metadata"].get("ownerReferences") or () if o["kind"] == "Node"]
        assert [(o["name"], o["uid"]) for o in owners] == [(node, uids.get(str(node)))], (
            f"slice {s['metadata']['name']} of node {node} has Node owners {owners}")


CONFLICT_TRIES = 5


def _as_driver(target: Target, account: str, node: str) -> Any:
    """A client acting as the driver's service account with a token bound to ``node`` (what
    the kubelet plugin on that node holds), by impersonation."""
    namespace, name = account.split("/")
    api = k8s.new_api_client(target.kubeconfig)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{name}")
    api.set_default_header("Impersonate-Group", "system:serviceaccounts")
    api.set_default_header("Impersonate-Extra-authentication.kubernetes.io%2Fnode-name", node)
    return api


def _dry_run_update(api: Any, rapi: ResourceApi, name: str) -> KubeError | None:
    """Replace slice ``name`` with itself plus a label in a server-side dry run (admission
    runs, nothing is stored); the refusal, if any. An update, the verb a kubelet plugin
    publishes with (the upstream resourceslice controller creates, updates and deletes; it
    never patches), so a driver granted only what it uses is judged by what it does. The slice
    is read afresh for each try: a plugin republishing meanwhile makes a try a conflict."""
    objects = kclient.CustomObjectsApi(api)
    for _ in range(CONFLICT_TRIES):
        body = rapi.get("resourceslices", name)
        body["metadata"].setdefault("labels", {})["conformance.fakegpu.dev/probe"] = "write"
        replace = functools.partial(objects.replace_cluster_custom_object, GROUP, rapi.version,
                                    "resourceslices", name, body, dry_run="All")
        try:
            errors.call(f"cannot update ResourceSlice {name}", replace)
        except KubeError as err:
            if err.status == 409:
                continue
            return err
        return None
    raise AssertionError(f"ResourceSlice {name} changed under each of {CONFLICT_TRIES} tries")


def test_slices_written_only_by_own_node(target: Target, rapi: ResourceApi,
                                         core: kclient.CoreV1Api) -> None:
    account = target.capabilities.setting("sliceWriteScope", "serviceAccount")
    assert account is not None
    by_node: dict[str, str] = {}
    for s in _node_local(rapi, target):
        by_node.setdefault(str(s["spec"].get("nodeName")), s["metadata"]["name"])
    others = _node_names(core)
    node, own = next(iter(sorted(by_node.items())))
    other_node = next((n for n in sorted(others) if n != node), None)
    if other_node is None:
        pytest.skip("not applicable: the cluster has one node, no other node's slice exists")
    api = _as_driver(target, account, node)
    try:
        refused = _dry_run_update(api, rapi, own)
        assert refused is None, (f"{account} bound to node {node} may not update its own "
                                 f"slice {own}: {refused}")
        # Another node's slice: one it publishes, or (a single node with slices) the same
        # write from a token bound to another node.
        foreign = by_node.get(other_node)
        if foreign is not None:
            refused = _dry_run_update(api, rapi, foreign)
            what = f"slice {foreign} of node {other_node}"
        else:
            api.close()
            api = _as_driver(target, account, other_node)
            refused = _dry_run_update(api, rapi, own)
            what = f"slice {own} of node {node} (as node {other_node})"
        assert refused is not None, f"{account} bound to node {node} may write {what}"
        assert refused.status in (403, 422), (
            f"writing {what}: expected a refusal, got {refused}")
    finally:
        api.close()
