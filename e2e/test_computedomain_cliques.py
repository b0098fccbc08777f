"""A ComputeDomain spans one NVLink clique: on a fabric split in two cliques
(packaged topology gb200-cliques), a node of the other clique is refused with a per-claim error
naming both cliques, while the domain's own nodes join."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.computedomain.names import PLURAL, VERSION, for_gpu_driver
from fakegpu.testkit import computedomain as cdkit
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import PodClaim, pod_manifest
from fakegpu.testkit.wait import NotYet, wait_for

# Embedded only: the refusal is the compute-domain plugin's own check, the same code on
# both providers (test_computedomain.py covers the chart's pieces on kind), and a fourth
# kind cluster would cost the kind pass minutes of bring-up.
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("gb200-cliques")]
TIMEOUT = 180.0


def test_a_node_in_another_clique_cannot_join(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api, namespace: str,
) -> None:
    names = for_gpu_driver(fakegpu_cluster.driver_name)
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    cdkit.create(k8s_client, names, namespace, "split", 2, "ch")

    def pod(name: str, node: str) -> dict[str, Any]:
        manifest = pod_manifest(name, fakegpu_cluster.workload_image, ["sleep", "3600"],
                                [PodClaim("imex", template="ch")])
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        return manifest

    k8s.create_pod(core_v1, namespace, pod("a", "gb200-a-0"))
    k8s.wait_pod_running(core_v1, namespace, "a", timeout=TIMEOUT)
    cd = custom.get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, "split")
    [joined] = cd["status"]["nodes"]
    ours = joined["cliqueID"]
    assert joined["name"] == "gb200-a-0" and ours.endswith(".1"), joined

    k8s.create_pod(core_v1, namespace, pod("b", "gb200-b-0"))

    def refused() -> str:
        for ev in core_v1.list_namespaced_event(namespace).items:
            if ev.involved_object.name == "b" and "cannot join" in (ev.message or ""):
                return str(ev.message)
        raise NotYet("no event says gb200-b-0 cannot join")

    message = wait_for(refused, what="pod b's event saying gb200-b-0 cannot join",
                       timeout=TIMEOUT, is_transient=k8s.is_transient_api_error)
    theirs = ours.rsplit(".", 1)[0] + ".2"  # the same fabric, clique 2
    assert f"node gb200-b-0 cannot join ComputeDomain {namespace}/split" in message, message
    assert f"clique {theirs}" in message and f"(gb200-a-0) in {ours}" in message, message
    # A node of the domain's clique joins meanwhile, and the domain gets Ready with it.
    k8s.create_pod(core_v1, namespace, pod("c", "gb200-a-1"))
    k8s.wait_pod_running(core_v1, namespace, "c", timeout=TIMEOUT)

    def ready() -> None:
        cd = custom.get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL,
                                                 "split")
        if (cd.get("status") or {}).get("status") != "Ready":
            raise NotYet(str(cd.get("status")))

    wait_for(ready, what="ComputeDomain split Ready", timeout=TIMEOUT,
             is_transient=k8s.is_transient_api_error)
    assert k8s.read_pod(core_v1, namespace, "b").status.phase == "Pending"
    custom.delete_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, "split")
