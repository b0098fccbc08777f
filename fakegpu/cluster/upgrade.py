"""What a plugin upgrade asks for (``Target``) and how it stalls, on either provider.

``fakegpu cluster upgrade-plugin`` and ``testkit.upgrade`` build a Target with
``check_target``; each provider rolls its plugins to it its own way (the embedded provider's
processes, ``embedded/pluginupgrade.py``; kind's Helm release, ``kind/upgrade.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.cluster.process import ProcessRecord
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.plugin import version as plugin_version

STRATEGIES = ("surge", "sequential")


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
    plugin_version.check(version, "--to")
    if strategy not in STRATEGIES:
        raise InvalidInput(f"--strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    if kill_old and strategy != "surge":
        raise InvalidInput("--kill-old needs --strategy surge (an overlap to kill in)")
    return Target(version, broken, strategy, kill_old, prepare_delay_s, tuple(nodes),
                  ready_timeout_s)
