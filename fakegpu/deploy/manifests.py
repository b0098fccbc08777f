"""The chart's shared manifests (``files/*.yaml``) rendered without Helm.

The files are plain YAML with ``${PLACEHOLDER}``s (see ``files/README.md``); the chart fills
them in its ``fakegpu.shared`` helper, this module for the embedded provider. Both fail on a
placeholder they do not know, so a new one cannot be forgotten by either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from fakegpu import drivers
from fakegpu.errors import FakegpuError

# What the kind provider installs the chart as, and so what the embedded provider uses too.
RELEASE = "fakegpu"
NAMESPACE = "fakegpu-system"
NIC_FILE = "nic.yaml"  # the NIC driver's DeviceClass
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_]*)\}")


@dataclass(frozen=True)
class Install:
    """The values the shared manifests are rendered with (the chart's, for release RELEASE)."""

    driver: str  # gpu.fakegpu.dev, gpu.nvidia.com, ...
    resource_api: str = "resource.k8s.io/v1"
    name: str = RELEASE  # the chart's fullname: "fakegpu" for release "fakegpu"
    namespace: str = NAMESPACE
    nic_driver: str = drivers.NIC  # the chart's nics.driverName (nic.fakegpu.dev, dra.net)
    nics: bool = True  # the chart's nics.enabled: a NIC plugin runs (its DeviceClass exists)

    @property
    def service_account(self) -> str:
        return self.name  # the chart's default (serviceAccount.name empty)

    @property
    def mig_class(self) -> str:
        """mig.<driver domain>: mig.fakegpu.dev, mig.nvidia.com (the chart's migClassName)."""
        return drivers.mig_class(self.driver)

    @property
    def extended_resource(self) -> str:
        """<driver domain>/gpu: fakegpu.dev/gpu, nvidia.com/gpu (the chart's
        extendedResourceName): what ``limits`` name to get a whole GPU through DRA."""
        return self.driver.removeprefix("gpu.") + "/gpu"

    @property
    def domain(self) -> str:
        """<driver domain>: nvidia.com, fakegpu.dev (the chart's driverDomain): ComputeDomains
        live in resource.<domain>, their driver is compute-domain.<domain>."""
        return self.driver.removeprefix("gpu.")

    def placeholders(self) -> dict[str, str]:
        return {"NAME": self.name, "NAMESPACE": self.namespace,
                "SERVICE_ACCOUNT": self.service_account, "DRIVER": self.driver,
                "MIG_CLASS": self.mig_class, "EXTENDED_RESOURCE": self.extended_resource,
                "RESOURCE_API": self.resource_api, "DOMAIN": self.domain,
                "NIC_DRIVER": self.nic_driver}


def files() -> list[Traversable]:
    """The shared manifest files, in the order they are applied (sorted by name)."""
    root = resources.files("fakegpu.deploy").joinpath("chart", "files")
    found = sorted((f for f in root.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    if not found:
        raise FakegpuError(f"fakegpu's shared manifests are missing ({root}): a broken install")
    return found


def fill(text: str, values: dict[str, str], where: str) -> str:
    """``text`` with every ``${NAME}`` replaced by ``values[NAME]``; unknown ones are errors."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise FakegpuError(f"{where}: unknown placeholder {m.group(0)}")
        return values[m.group(1)]

    return _PLACEHOLDER.sub(one, text)


def render_file(f: Traversable, install: Install) -> list[dict[str, Any]]:
    text = fill(f.read_text(), install.placeholders(), f.name)
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as err:
        raise FakegpuError(f"{f.name}: not YAML ({err})") from err


def render(install: Install) -> list[dict[str, Any]]:
    """Every shared object (service account, RBAC, admission policy, DeviceClasses); the NIC
    DeviceClass only where a NIC plugin runs, as the chart does."""
    return [obj for f in files() if install.nics or f.name != NIC_FILE
            for obj in render_file(f, install)]


def device_classes(install: Install) -> list[dict[str, Any]]:
    return [o for o in render(install) if o["kind"] == "DeviceClass"]
