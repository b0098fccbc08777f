"""Another vendor's DRA driver as it ships, a Helm chart and its images, on fake GPU nodes
(``cluster up --provider kind --plugin-chart``; docs/vendors.md).

fakegpu lays down the fake GPU nodes (its chart with ``driver.enabled=false`` and
``fakeNodes.enabled=true``: each node's NVML state and the NVIDIA host a driver expects, its
driver root at ``DRIVER_ROOT``), loads the given images into the nodes and installs the chart
unchanged with the given values files on top; the bring-up is over when the driver has
published a whole ResourceSlice pool for every node. fakegpu's own driver is installed the
same way on every kind cluster (its chart, its image, values fakegpu computes): one path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import InvalidInput

# Where the fake nodes' host lives on every node (the chart's fakeNodes.hostRoot + /nvhost):
# a vendor points its driver root here.
HOST_ROOT = "/var/lib/fakegpu"
DRIVER_ROOT = f"{HOST_ROOT}/nvhost/driver"
RELEASE = "dra-driver"  # the vendor chart's release, in a namespace of the same name
# A DRA driver name: a DNS subdomain of at most 63 characters (resource.k8s.io's rule).
_DRIVER = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+")


@dataclass(frozen=True)
class DriverChart:
    chart: str  # a chart directory or packaged .tgz (absolute), or an oci:// reference
    driver: str  # the DRA driver name its plugins publish: what the bring-up waits for
    values: tuple[str, ...] = ()  # values files (absolute), applied in order
    images: tuple[str, ...] = ()  # local Docker images loaded into every node first

    @property
    def release(self) -> str:
        return RELEASE

    @property
    def namespace(self) -> str:
        return RELEASE

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "values": list(self.values), "images": list(self.images)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DriverChart:
        return cls(chart=str(doc["chart"]), driver=str(doc["driver"]),
                   values=tuple(doc.get("values") or ()), images=tuple(doc.get("images") or ()))


def parse(chart: str, *, driver: str | None, values: Sequence[Path] = (),
          images: Sequence[str] = ()) -> DriverChart:
    """``--plugin-chart`` and its companions, checked: InvalidInput naming the flag."""
    if not driver:
        raise InvalidInput("--plugin-chart: give --plugin-driver NAME, the DRA driver name the "
                           "chart's plugins publish (the bring-up waits for its slices)")
    if len(driver) > 63 or not _DRIVER.fullmatch(driver):
        raise InvalidInput(f"--plugin-driver {driver!r}: expected a DRA driver name, a DNS "
                           "subdomain of at most 63 characters such as gpu.example.com")
    if chart.startswith("oci://"):
        where = chart
    else:
        path = Path(chart).expanduser()
        if not (path / "Chart.yaml").is_file() and not (path.is_file()
                                                         and path.name.endswith(".tgz")):
            raise InvalidInput(f"--plugin-chart {chart}: expected a chart directory (with "
                               "Chart.yaml), a packaged chart (.tgz) or an oci:// reference")
        where = str(path.resolve())
    files = []
    for v in values:
        if not Path(v).expanduser().is_file():
            raise InvalidInput(f"--plugin-values {v}: no such file")
        files.append(str(Path(v).expanduser().resolve()))
    for image in images:
        if not image or any(c.isspace() for c in image):
            raise InvalidInput(f"--plugin-image {image!r}: expected an image name, "
                               "e.g. example.com/driver:v1")
    return DriverChart(chart=where, driver=driver, values=tuple(files), images=tuple(images))
