"""Roll the embedded cluster's plugins to another version, node by node, as a DaemonSet would.

``surge`` (maxSurge 1 / maxUnavailable 0, the chart's default): on each node the new instance
starts beside the old one with sockets of its own (``--instance-id``, REFERENCE.md section 1),
and only once the kubelet has registered it is the old one stopped. The old one sees the new
one alive and leaves the node's ResourceSlices; calls in flight finish on the old one, new
calls go to the new one (the kubelet prefers the newest instance).

``sequential`` (maxSurge 0 / maxUnavailable 1): the old instance is stopped for replacement
(SIGUSR1: it leaves the slices), then the new one starts; the node is briefly without a plugin
and pods that arrive meanwhile wait for it.

A new instance that never becomes ready (a broken release, ``version.py``) stalls the rollout
on that node as a DaemonSet does: the upgrade fails with the instance's log tail, the old
instance keeps serving, the new one is left running (``pending``) until the next upgrade
(a rollback to the serving version) stops it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakegpu.cluster.embedded import node as nodemod
from fakegpu.cluster.embedded import worker
from fakegpu.cluster.embedded.layout import NodeLayout
from fakegpu.cluster.embedded.state import ClusterState
from fakegpu.cluster.process import (
    ComponentError,
    ProcessRecord,
    WaitPolicy,
    current_run_log,
    is_alive,
    terminate,
    wait_until,
)
from fakegpu.cluster.upgrade import Target, UpgradeStalled

REGISTERED_LINE = nodemod.PLUGIN_REGISTERED


def instance_id(version: str) -> str:
    """Unique per instance (sockets, log file); names the version for whoever reads logs."""
    return f"{version[:16].rstrip('.-_')}-{secrets.token_hex(3)}"


def instance_of(rec: ProcessRecord) -> str:
    """The instance id a record's log file was named for (``plugin-<id>.log``)."""
    stem = rec.log.stem
    return stem.removeprefix("plugin-") if stem.startswith("plugin-") else ""


def registered(rec: ProcessRecord) -> bool:
    """Whether the kubelet has registered the instance (its own log says so)."""
    return REGISTERED_LINE in current_run_log(rec)


@dataclass
class NodeRoll:
    """What the upgrade does to one node, given how to start and stop instances."""

    layout: NodeLayout
    start: Callable[[dict[str, str], str], ProcessRecord]  # (extra env, instance id) -> record
    policy: WaitPolicy
    grace_s: float = 35.0  # the plugin's own grace (30 s) and a little

    def roll(self, old: ProcessRecord | None, target: Target) -> ProcessRecord:
        """Replace ``old`` by an instance of ``target``; UpgradeStalled if it never serves."""
        if target.strategy == "sequential" and old is not None:
            stop_for_replacement(old, self.grace_s)
        new = self.start(target.env(), instance_id(target.version))
        try:
            wait_until(f"plugin {target.version} on node {self.layout.name} registered by "
                       "the kubelet", lambda: registered(new), self.policy, watch=[new])
        except ComponentError as err:
            raise UpgradeStalled(
                f"node {self.layout.name}: plugin version {target.version} did not become "
                f"ready; the rollout stops here"
                + ("" if target.strategy == "sequential" else
                   " and the previous instance keeps serving") + f". {err}", new) from None
        if target.strategy == "surge" and old is not None:
            if target.kill_old:
                kill_now(old)
            else:
                terminate(old, self.grace_s)
        return new


def kill_now(rec: ProcessRecord) -> None:
    """kill -9 of one instance (a crash during the overlap): no shutdown path runs."""
    import os
    import signal

    from fakegpu.cluster.process import gone_within

    if is_alive(rec):
        with contextlib.suppress(ProcessLookupError):
            os.kill(rec.pid, signal.SIGKILL)
        gone_within([rec], 10.0)


def stop_for_replacement(rec: ProcessRecord, grace_s: float) -> None:
    """SIGUSR1 (leave the slices), then what ``terminate`` does if it lingers."""
    import os
    import signal

    from fakegpu.cluster.process import gone_within

    if not is_alive(rec):
        return
    try:
        os.kill(rec.pid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    if not gone_within([rec], grace_s):
        terminate(rec, 5.0)


def read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = json.loads(path.read_text())
    return env


def upgrade(st: ClusterState, target: Target, policy: WaitPolicy,
            say: Callable[[str], None]) -> list[str]:
    """Roll every node's plugin of ``st`` to ``target``; the nodes it changed.

    An instance an earlier, stalled upgrade left pending is stopped first: rolling back to
    the serving version is this same call. Nodes already at the version are skipped.
    """
    members = worker.nodes(st, policy)
    for node in members:
        pending = node.forget(worker.PENDING)
        if pending is not None:
            say(f"node {node.name}: stopping the pending instance of a stalled upgrade")
            terminate(pending, 5.0)
            st.save()
    for wanted in target.nodes:
        st.node(wanted)  # an unknown node is bad input, before anything changes
    changed = []
    for node in members:
        n = node.state
        if target.nodes and n.name not in target.nodes:
            continue
        old = node.process(worker.PLUGIN) if node.alive(worker.PLUGIN) else None
        if (n.plugin_version == target.version and not target.broken
                and not target.prepare_delay_s and old is not None):
            continue
        env = node.env

        def start(extra: dict[str, str], iid: str, node: worker.EmbeddedNode = node,
                  env: dict[str, str] = env) -> ProcessRecord:
            # Recorded before it is waited for: `down` stops it whatever happens next.
            return node.start_plugin(env, instance=iid, comp=worker.PENDING, extra_env=extra)

        say(f"node {n.name}: {target.strategy} upgrade to {target.version}")
        wait = (WaitPolicy(target.ready_timeout_s, policy.interval)
                if target.ready_timeout_s else policy)
        try:
            new = NodeRoll(node.layout, start, wait).roll(old, target)
        except UpgradeStalled:
            st.save()  # the pending instance stays recorded as plugin-pending/<node>
            raise
        node.forget(worker.PENDING)
        node.record(worker.PLUGIN, new)
        n.plugin_version = target.version
        n.plugin_instance = instance_of(new)
        st.save()
        changed.append(n.name)
        say(f"node {n.name}: version {target.version} serves")
    return changed
