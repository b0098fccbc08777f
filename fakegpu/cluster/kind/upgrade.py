"""kind: roll the plugin DaemonSet to another version, as a driver vendor does: ``helm upgrade``.

The version is baked into the cluster's plugin image of this tree (one layer writing
``/opt/fakegpu/VERSION``, ``fakegpu/plugin/version.py``; a broken release is stamped
``<version>-broken``), loaded into the workers and set as the chart's ``image.tag``;
``upgradeStrategy`` picks maxSurge 1 / maxUnavailable 0 (surge) or 0 / 1 (sequential). The
rollout is then watched on the DaemonSet: done when every node runs an updated, available pod;
stalled when it makes no progress for the allowed time (a new pod that never becomes Ready
holds it, as Kubernetes does, and the old pod of that node keeps serving). Upgrading to the
serving version again is the rollback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fakegpu.cluster.kind import dockerhost, image, tools
from fakegpu.cluster.process import WaitPolicy, run, wait_until
from fakegpu.cluster.upgrade import Target, UpgradeStalled
from fakegpu.errors import InvalidInput
from fakegpu.kube import api as kubeapi
from fakegpu.plugin import version as plugin_version

if TYPE_CHECKING:
    from fakegpu.cluster.kind.provider import KindProvider
    from fakegpu.cluster.kind.state import KindState

DAEMONSET = "fakegpu"  # the chart's fullname for release "fakegpu"


def rollout_state(ds: Mapping[str, Any]) -> tuple[bool, int]:
    """(done, progress) of a DaemonSet rollout, from its status. Pure.

    Done: the controller saw the latest spec and every scheduled node runs an updated,
    available pod with no old one left. Progress counts updated and available pods, so a
    stall is a progress that stops changing.
    """
    meta, status = ds.get("metadata") or {}, ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    current = int(status.get("currentNumberScheduled") or 0)
    seen = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    done = (seen and desired > 0 and updated == desired and available == desired
            and current == desired and not int(status.get("numberUnavailable") or 0))
    return done, updated + available


def stamp(target: Target) -> str:
    if target.broken and not target.version.endswith(plugin_version.BROKEN_SUFFIX):
        return target.version + plugin_version.BROKEN_SUFFIX
    return target.version


def upgrade(p: KindProvider, st: KindState, target: Target,
            say: Callable[[str], None]) -> list[str]:
    if target.nodes or target.kill_old:
        raise InvalidInput("kind upgrades roll the plugin DaemonSet on every node and let "
                           "Kubernetes stop the old pods: a partial rollout (nodes) or a kill "
                           "of the old instance needs the embedded provider")
    from fakegpu.cluster.kind.charts import CHART, NAMESPACE, RELEASE

    docker = dockerhost.docker_client()
    if docker is None:
        raise InvalidInput("no Docker client for the kind cluster")
    # The cluster's own image of this tree, stamped (plugin_version checked the version: a
    # safe tag and shell word).
    ref = image.stamped(docker, st.plugin_image, stamp(target))
    say(f"loading {ref} into the workers")
    p._kind("load", "docker-image", ref, "--name", st.name,
            "--nodes", ",".join(st.containers[w] for w in st.workers))
    repo, tag = ref.rsplit(":", 1)
    env = ([{"name": plugin_version.PREPARE_DELAY_ENV, "value": str(target.prepare_delay_s)}]
           if target.prepare_delay_s else [])
    helm = tools.executable(tools.helm(), p.console)
    say(f"helm upgrade to {tag} ({target.strategy})")
    run([str(helm), "upgrade", RELEASE, str(CHART), "--kubeconfig", str(st.kubeconfig),
         "-n", NAMESPACE, "--reuse-values", "--set", f"image.repository={repo}",
         "--set", f"image.tag={tag}", "--set", f"upgradeStrategy={target.strategy}",
         "--set-json", f"extraEnv={json.dumps(env)}"], timeout=300)
    wait_rollout(st, NAMESPACE, target, target.ready_timeout_s or p.policy.timeout, say)
    return list(st.workers)


def wait_rollout(st: KindState, namespace: str, target: Target, stall_s: float,
                 say: Callable[[str], None]) -> None:
    """Until the DaemonSet's rollout is done; UpgradeStalled after ``stall_s`` without
    progress (a new pod that never becomes Ready)."""
    last, since = -1, time.monotonic()
    while True:
        with kubeapi.session(st.kubeconfig) as api:
            ds = kubeapi.get_json(api, f"/apis/apps/v1/namespaces/{namespace}/daemonsets/"
                                       f"{DAEMONSET}")
        done, progress = rollout_state(ds)
        if done:
            return
        if progress != last:
            last, since = progress, time.monotonic()
            say(f"rollout of {target.version}: {progress} updated+available")
        elif time.monotonic() - since > stall_s:
            status = ds.get("status") or {}
            with kubeapi.session(st.kubeconfig) as api:
                pods = kubeapi.get_json(api, f"/api/v1/namespaces/{namespace}/pods?"
                                             f"labelSelector={quote(selector(ds))}")
            waiting = not_ready(pods.get("items") or [])
            raise UpgradeStalled(
                f"plugin version {target.version} did not become ready"
                + (f" ({'; '.join(waiting)})" if waiting else "")
                + f": the DaemonSet rollout made no progress for {stall_s:.0f}s (updated "
                f"{status.get('updatedNumberScheduled', 0)}, available "
                f"{status.get('numberAvailable', 0)} of {status.get('desiredNumberScheduled')});"
                " the rollout stops here and the old pods keep serving the nodes not yet "
                "updated")
        time.sleep(1.0)


def selector(ds: Mapping[str, Any]) -> str:
    """The DaemonSet's matchLabels as a label selector query value. Pure."""
    labels = ((ds.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def not_ready(pods: list[Mapping[str, Any]]) -> list[str]:
    """'pod P on node N: not Ready (reason)' for each pod of the list not Ready. Pure."""
    out = []
    for pod in pods:
        conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready") or {}
        if ready.get("status") == "True":
            continue
        why = ready.get("reason") or (pod.get("status") or {}).get("phase") or "unknown"
        out.append(f"pod {pod['metadata']['name']} on node "
                   f"{(pod.get('spec') or {}).get('nodeName') or '(unscheduled)'}: not Ready "
                   f"({why})")
    return out


# The chart's plugin pods (its selector labels for release "fakegpu").
PLUGIN_SELECTOR = "app.kubernetes.io/name=fakegpu,app.kubernetes.io/instance=fakegpu"


def restart_pod(st: KindState, node: str, policy: WaitPolicy) -> None:
    """Delete the DaemonSet's plugin pod on ``node`` (its kubelet stops it with the pod's
    grace) and wait until its replacement there is Ready."""
    from kubernetes import client as kclient

    from fakegpu.cluster.kind.charts import NAMESPACE

    def pods() -> list[Any]:
        with kubeapi.session(st.kubeconfig) as api:
            found: list[Any] = kclient.CoreV1Api(api).list_namespaced_pod(
                NAMESPACE, label_selector=PLUGIN_SELECTOR,
                field_selector=f"spec.nodeName={node}").items
        return found

    old = {p.metadata.uid for p in pods()}
    with kubeapi.session(st.kubeconfig) as api:
        for pod in pods():
            kclient.CoreV1Api(api).delete_namespaced_pod(pod.metadata.name, NAMESPACE)

    def replaced() -> bool:
        return any(p.metadata.uid not in old and p.metadata.deletion_timestamp is None and any(
            c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
            for p in pods())

    wait_until(f"a new plugin pod Ready on node {node}", replaced, policy)


def plugin_instances(st: KindState) -> dict[str, list[dict[str, str]]]:
    """Node -> the DaemonSet's plugin pods there that are not gone yet (from the API), with
    the role a test sees: starting, ready, stopping."""
    from kubernetes import client as kclient

    from fakegpu.cluster.kind.charts import NAMESPACE

    out: dict[str, list[dict[str, str]]] = {n: [] for n in st.workers}
    with kubeapi.session(st.kubeconfig) as api:
        pods: list[Any] = kclient.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector=PLUGIN_SELECTOR).items
    for pod in pods:
        # Alive: its plugin container runs (a pod being deleted may still run it).
        running = any(c.name == "plugin" and c.state and c.state.running
                      for c in pod.status.container_statuses or ())
        if running and pod.spec.node_name in out:
            ready = any(c.type == "Ready" and c.status == "True"
                        for c in pod.status.conditions or ())
            # A pod being deleted is told to stop as soon as its kubelet gets to it; the
            # kubelet reports the container gone later, late by tens of seconds on a loaded
            # host, so from the API its serving ends when its deletion begins.
            role = ("stopping" if pod.metadata.deletion_timestamp is not None
                    else "ready" if ready else "starting")
            tag = pod.spec.containers[0].image or ""
            out[pod.spec.node_name].append({"version": tag.rsplit(":", 1)[-1],
                                            "instance": str(pod.metadata.uid), "role": role})
    return out
