"""The one create/delete flow above every provider (the shape of kind's ``create.Cluster``).

``up``: validate the name and the topology (loaded once, passed down as a model), refuse a
cluster that exists (a leftover counts), let the provider refuse a host it cannot use, record
the cluster's state *before* anything is made, then run the provider's named actions with one
status line each. On any failure: mark the state failed, then either keep everything
(``retain``) or save the logs to ``/tmp/fakegpu-<name>-failed-*`` and delete what was made.
Providers only provision, list, delete and collect logs: this path exists once.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from fakegpu import drivers
from fakegpu.cluster import featuregates, imagealiases
from fakegpu.cluster.names import down_command, validate_name
from fakegpu.cluster.provider import (
    Action,
    ClusterInfo,
    ClusterSpec,
    PluginInstances,
    Provider,
    Provisioning,
)
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.topology.load import load_topology

if TYPE_CHECKING:
    from fakegpu.cluster.driverchart import DriverChart
    from fakegpu.cluster.external import ExternalPlugin
    from fakegpu.cluster.upgrade import Target


class Progress:
    """One status line per named action on the console, then a tick with its duration."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        start = time.monotonic()
        with self.console.status(f"{text} ..."):
            yield
        self.console.print(f"[green]✓[/] {text} [dim]({time.monotonic() - start:.1f}s)[/]")

    def run(self, action: Action) -> None:
        with self.step(action.title):
            action.run()


def load_spec(name: str, topology: Path, k8s_version: str | None, *,
              driver: str = "fakegpu", plugin: ExternalPlugin | None = None,
              image_aliases: Sequence[str] = (),
              nic_driver: str = drivers.NIC_DEFAULT_KEY,
              chart: DriverChart | None = None) -> ClusterSpec:
    """Validate what ``up`` was asked for; every problem is InvalidInput naming the input."""
    from fakegpu.cluster import driver_name
    from fakegpu.cluster.artifacts import binaries

    validate_name(name)
    dra_driver = driver_name(driver)
    try:
        nic = drivers.nic_by_key(nic_driver)
    except ValueError as err:
        raise InvalidInput(f"--nic-driver: {err}") from None
    if plugin is not None and plugin.beside and plugin.driver_name(dra_driver) == dra_driver:
        raise InvalidInput(f"--plugin-beside: that plugin publishes {dra_driver}, as fakegpu's "
                           "plugin does on this cluster; give it another --plugin-driver or "
                           "run it in fakegpu's place")
    if chart is not None and plugin is not None:
        raise InvalidInput("--plugin-chart and --plugin-bin: give one vendor's driver, as a "
                           "Helm chart (kind) or as a binary (embedded)")
    if chart is not None:
        nic = ""  # the vendor's driver stands alone: fakegpu runs no plugin of its own
    aliases = tuple(imagealiases.normalize_all(image_aliases))
    if not topology.is_file():
        raise InvalidInput(f"topology file not found: {topology}")
    topo = load_topology(topology)
    if not topo.nodes:
        raise InvalidInput(f"{topology}: the topology has no nodes")
    version = binaries.resolve_version(k8s_version)
    minor = featuregates.parse_minor(version)
    for node in topo.nodes:
        if node.pcie is not None and node.pcie.numa_list:
            featuregates.require(minor, "DRAListTypeAttributes",
                                 f"{topology}: node {node.name}: pcie.numa_attribute list")
        if node.time_sliced:
            featuregates.require(minor, "DRADeviceCompatibilityGroups",
                                 f"{topology}: node {node.name}: time_slices")
    return ClusterSpec(name=name, topology_file=topology.resolve(), topology=topo,
                       k8s_version=version, driver=dra_driver,
                       plugin=plugin, image_aliases=aliases, nic_driver=nic, chart=chart)


class Lifecycle:
    """A provider with the one create/delete flow above it: what ``get_provider`` returns."""

    def __init__(self, provider: Provider, console: Console | None = None, *,
                 retain: bool = False) -> None:
        self.provider = provider
        self.console = console or Console(stderr=True)
        self.retain = retain

    @property
    def name(self) -> str:
        return self.provider.name

    def up(self, name: str, topology: Path, k8s_version: str | None, *,
           driver: str = "fakegpu", plugin: ExternalPlugin | None = None,
           image_aliases: Sequence[str] = (),
           nic_driver: str = drivers.NIC_DEFAULT_KEY,
           chart: DriverChart | None = None) -> ClusterInfo:
        spec = load_spec(name, topology, k8s_version, driver=driver, plugin=plugin,
                         image_aliases=image_aliases, nic_driver=nic_driver, chart=chart)
        if self.provider.exists(name):
            raise InvalidInput(f"cluster {name!r} already exists (or is left over): run "
                               f"`{self.down_command(name)}` first")
        self.provider.check_host(spec)
        progress = Progress(self.console)
        bringup = self.provider.provision(spec)
        try:
            bringup.state.save()  # from here on, `down` knows this cluster
            for action in bringup.actions():
                progress.run(action)
        except BaseException as err:
            self._failed(name, bringup, err)
            if isinstance(err, FakegpuError | KeyboardInterrupt):
                raise
            raise FakegpuError(f"cluster up failed: {err}") from err
        info = self.provider.status(name)
        if info is None:
            raise FakegpuError(f"cluster {name!r} was made but its state is gone")
        return info

    def _failed(self, name: str, bringup: Provisioning, err: BaseException) -> None:
        """Keep the failed cluster (retain), or save its logs and delete it.

        Best-effort cleanup: a failure here is added to the original error as a note and
        never replaces it.
        """
        try:
            bringup.state.phase = "failed"
            bringup.state.save()
        except Exception as why:
            err.add_note(f"marking cluster {name!r} failed also failed: {why}")
        if self.retain:
            self.console.print(f"[yellow]keeping the failed cluster {name!r} (--retain); "
                               f"remove it with `{self.down_command(name)}`[/]")
            return
        # Deleting the cluster removes its logs: keep a copy for the post-mortem first.
        saved = Path(tempfile.mkdtemp(prefix=f"fakegpu-{name}-failed-"))
        try:
            written = self.provider.logs(name, saved)
            self.console.print(f"[yellow]logs of the failed cluster ({len(written)} files): "
                               f"{saved}[/]", soft_wrap=True)
            err.add_note(f"logs of the failed cluster: {saved}")
        except Exception as why:
            err.add_note(f"saving the failed cluster's logs to {saved} failed: {why}")
        self.console.print("[yellow]cleaning up after the failure ...[/]")
        try:
            self.provider.delete(name)
        except Exception as why:
            err.add_note(f"removing the failed cluster failed too ({why}): run "
                         f"`{self.down_command(name)}`")

    def down_command(self, name: str) -> str:
        return down_command(name, self.name)

    def down(self, name: str) -> None:
        self.provider.delete(validate_name(name))

    def status(self, name: str) -> ClusterInfo | None:
        return self.provider.status(validate_name(name))

    def healthy(self, name: str) -> bool:
        return self.provider.healthy(validate_name(name))

    def logs(self, name: str, out: Path) -> list[Path]:
        return self.provider.logs(validate_name(name), out)

    def stop_node(self, name: str, node: str) -> None:
        self.provider.stop_node(validate_name(name), node)

    def start_node(self, name: str, node: str) -> None:
        self.provider.start_node(validate_name(name), node)

    def restart_plugin(self, name: str, node: str) -> None:
        self.provider.restart_plugin(validate_name(name), node)

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]:
        return self.provider.node_nvml(validate_name(name), node, args)

    def upgrade_plugin(self, name: str, target: Target,
                       say: Callable[[str], None] = lambda _line: None) -> list[str]:
        return self.provider.upgrade_plugin(validate_name(name), target, say)

    def upgrade_kubernetes(self, name: str, version: str,
                           say: Callable[[str], None] = lambda _line: None) -> list[str]:
        return self.provider.upgrade_kubernetes(validate_name(name), version, say)

    def plugin_instances(self, name: str) -> PluginInstances:
        return self.provider.plugin_instances(validate_name(name))

    def tag_images(self, name: str, names: Sequence[str]) -> None:
        if normalized := imagealiases.normalize_all(names):
            self.provider.tag_images(validate_name(name), normalized)
