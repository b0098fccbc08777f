"""What the kind provider records of a cluster (``dataclasses.asdict`` of ``KindState``), in
``paths.cache_dir()/kind/clusters/<name>/state.json``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakegpu import drivers, fsutil, paths
from fakegpu.cluster.driverchart import DriverChart
from fakegpu.cluster.names import down_command
from fakegpu.errors import FakegpuError


def clusters_dir() -> Path:
    return paths.cache_dir() / "kind" / "clusters"


@dataclass
class KindState:
    name: str
    k8s_version: str
    topology: str
    driver: str
    node_image: str = ""
    plugin_image: str = ""
    workload_image: str = ""
    phase: str = "creating"
    containers: dict[str, str] = field(default_factory=dict)  # k8s node -> container
    workers: list[str] = field(default_factory=list)
    # The NIC plugin's driver name (drivers.NIC_CHOICES): nic.fakegpu.dev, dra.net; "": none.
    nic_driver: str = drivers.NIC
    # Another vendor's driver as a Helm chart (DriverChart.to_json), in fakegpu's place.
    chart: dict[str, Any] | None = None

    def driver_chart(self) -> DriverChart | None:
        return None if self.chart is None else DriverChart.from_json(self.chart)

    @property
    def root(self) -> Path:
        return clusters_dir() / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def save(self) -> None:
        fsutil.atomic_write(self.root / "state.json", json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, name: str) -> KindState | None:
        try:
            return cls(**json.loads((clusters_dir() / name / "state.json").read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as err:
            raise FakegpuError(f"kind cluster {name!r}: unreadable state ({err}): run "
                               f"`{down_command(name, 'kind')}`") from err
