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

from fakegpu.cluster.node import NodeLayout
from fakegpu.cluster.process import (
    ComponentError,
    ProcessRecord,
    WaitPolicy,
    current_run_log,
    is_alive,
    terminate,
    wait_until,
)
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.plugin import version as plugin_version

STRATEGIES = ("surge", "sequential")
REGISTERED_LINE = "kubelet registered the plugin"


class UpgradeStalled(FakegpuError):
    """A new plugin instance never became ready: the rollout stopped on that node.

    ``pending`` is that instance, left running as a DaemonSet leaves its pod."""

    def __init__(self, message: str, pending: ProcessRecord | None = None) -> None:
        super().__init__(message)
        self.pending = pending


@dataclass(frozen=True)
class Target:
    version: str
    broken: bool = False
    strategy: str = "surge"
    kill_old: bool = False  # SIGKILL the old instance during the overlap (surge only)
    prepare_delay_s: float = 0.0  # test hook: each prepare of the new instances waits this long
    nodes: tuple[str, ...] = ()  # only these nodes (a partial rollout); empty: every node
    ready_timeout_s: float = 0.0  # how long a new instance may take (0: the provider's wait)

    def env(self) -> dict[str, str]:
        env = {plugin_version.VERSION_ENV: self.version}
        if self.broken:
            env[plugin_version.BROKEN_ENV] = "1"
        if self.prepare_delay_s:
            env[plugin_version.PREPARE_DELAY_ENV] = str(self.prepare_delay_s)
        return env


def check_target(version: str, broken: bool = False, strategy: str = "surge", *,
                 kill_old: bool = False, prepare_delay_s: float = 0.0,
                 nodes: tuple[str, ...] = (), ready_timeout_s: float = 0.0) -> Target:
    plugin_version.check(version, "--version")
    if strategy not in STRATEGIES:
        raise InvalidInput(f"--strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    if kill_old and strategy != "surge":
        raise InvalidInput("--kill-old needs --strategy surge (an overlap to kill in)")
    return Target(version, broken, strategy, kill_old, prepare_delay_s, tuple(nodes),
                  ready_timeout_s)


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
