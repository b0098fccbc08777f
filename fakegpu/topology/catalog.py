"""The hardware catalog: facts about real GPU products, read from ``catalog/*.yaml``.

The data files are package data and trusted; a malformed one is a bug in fakegpu, so it
raises a plain error naming the file rather than a user-facing TopologyError.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

from . import pcie
from .fields import Report
from .model import (
    Baseboard,
    MigCapability,
    MigGpuInstanceProfile,
    MigPlacement,
    NvLinkSpec,
    PciAddress,
    PcieTree,
    Product,
)


def parse_pci(text: str) -> PciAddress:
    """``DDDD:BB:DD.F`` (4- or 8-digit domain) -> PciAddress; ValueError if malformed."""
    address = pcie.parse_address(text)
    if address is None:
        raise ValueError(f"malformed PCI bus id {text!r}")
    return address


def _mig(data: dict[str, Any]) -> MigCapability:
    profiles = []
    for row in data["profiles"]:
        (name, nvml_id, smi_id, count, gslices, mslices, gib, sms,
         ce, dec, enc, jpeg, ofa, starts, size) = row
        profiles.append(MigGpuInstanceProfile(
            id=nvml_id, name=name, instance_count=count, slice_count=gslices,
            memory_slices=mslices, memory_mib=round(float(gib) * 1024), sm_count=sms,
            copy_engines=ce, decoders=dec, encoders=enc, jpegs=jpeg, ofas=ofa,
            placements=tuple(MigPlacement(s, size) for s in starts), smi_id=smi_id,
        ))
    return MigCapability(
        memory_slices=data["memory_slices"], compute_slices=data["compute_slices"],
        max_gpu_instances=data["max_gpu_instances"], profiles=tuple(profiles),
    )


def _pcie(data: dict[str, Any]) -> PcieTree | None:
    """The board's PCIe tree, checked by the same rules as a topology's ``pcie`` section."""
    raw = data.get("pcie")
    if raw is None:
        return None
    report = Report()
    tree = pcie.parse(report, raw, "baseboard.pcie", [parse_pci(p) for p in data["pci"]],
                      {parse_pci(p).bus_id: "an NVSwitch" for p in data.get("nvswitch_pci", ())})
    if tree is None or report.problems:
        raise ValueError("; ".join(f"{p.path}: {p.message}" for p in report.problems))
    return tree


def _baseboard(data: dict[str, Any]) -> Baseboard:
    return Baseboard(
        system=data["system"],
        pci=tuple(parse_pci(p) for p in data["pci"]),
        numa=tuple(data["numa"]),
        gpus_per_board=data.get("gpus_per_board", 1),
        nvswitches=data.get("nvswitches", 0),
        nvswitch_pci=tuple(parse_pci(p) for p in data.get("nvswitch_pci", ())),
        fabric_switch_chips=data.get("fabric_switch_chips", 0),
        pcie=_pcie(data),
    )


def _product(data: dict[str, Any]) -> Product:
    nvlink = data.get("nvlink")
    mig = data.get("mig")
    board = data.get("baseboard")
    major, minor = data["cuda_compute_capability"]
    return Product(
        key=data["key"], name=data["name"], brand=data["brand"],
        architecture=data["architecture"], cuda_compute_capability=(major, minor),
        memory_mib=data["memory_mib"], pci_device_id=data["pci_device_id"],
        pci_subsystem_id=data["pci_subsystem_id"], sm_count=data["sm_count"],
        board_part_number=data["board_part_number"],
        nvlink=NvLinkSpec(**nvlink) if nvlink else None,
        mig=_mig(mig) if mig else None,
        power_limit_mw=data["power_limit_mw"], max_sm_clock_mhz=data["max_sm_clock_mhz"],
        max_mem_clock_mhz=data["max_mem_clock_mhz"],
        sources=tuple(data.get("sources", ())), uncertain=tuple(data.get("uncertain", ())),
        baseboard=_baseboard(board) if board else None,
        multinode_nvlink=bool(data.get("multinode_nvlink", False)),
        memory_reserved_bytes=data.get("memory_reserved_bytes"),
        idle_sm_clock_mhz=data.get("idle_sm_clock_mhz"),
    )


@functools.cache
def products() -> dict[str, Product]:
    """All catalog products by key, in file-name order."""
    found: dict[str, Product] = {}
    folder = resources.files(__package__).joinpath("catalog")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        try:
            product = _product(yaml.safe_load(entry.read_text(encoding="utf-8")))
        except (KeyError, TypeError, ValueError, yaml.YAMLError) as err:
            raise RuntimeError(f"broken catalog file {entry.name}: {err!r}") from err
        found[product.key] = product
    return found


def lookup(key: str) -> Product | None:
    """A product by catalog key, case-insensitively (``h100-sxm5-80gb`` works too)."""
    wanted = key.strip().lower()
    return next((p for k, p in products().items() if k.lower() == wanted), None)
