"""PCI addresses of a node's GPUs and NVSwitches: the catalog's, or invented without clashes.

Within the product's reference baseboard the catalog's addresses are used as they are. Beyond
it (more GPUs or NVSwitches than the real system has) addresses are invented in domain 0,
skipping every bus already taken, so no two devices of a node share a bus id; a bus number
above 0xFF does not exist, and ``problem`` says so.
"""

from __future__ import annotations

from .model import PciAddress, Product

MAX_BUS = 0xFF
_GPU_BASE, _GPU_STEP = 0x10, 0x0E  # evenly spaced buses for GPUs beyond the baseboard's
_SWITCH_BASE = 0xE0  # NVSwitches beyond the baseboard's, above the GPUs


def addresses(product: Product, gpus: int, switches: int) -> tuple[list[PciAddress],
                                                                   list[PciAddress]]:
    """(GPU addresses in NVML index order, NVSwitch addresses) of one node."""
    board = product.baseboard
    known_gpus = list(board.pci) if board else []
    known_switches = list(board.nvswitch_pci[:switches]) if board else []
    taken = {(a.domain, a.bus) for a in known_switches}
    if gpus <= len(known_gpus):
        gpu_pci = known_gpus[:gpus]
    else:
        # Evenly spaced and increasing, so the NVML index order (by bus id) still matches
        # the position order; a bus the node's NVSwitches use is skipped.
        gpu_pci = []
        bus = 0
        for i in range(gpus):
            bus = max(_GPU_BASE + i * _GPU_STEP, bus + 1)
            while (0, bus) in taken:
                bus += 1
            gpu_pci.append(PciAddress(0, bus, 0))
    taken |= {(a.domain, a.bus) for a in gpu_pci}
    switch_pci = list(known_switches)
    bus = 0
    for s in range(len(known_switches), switches):
        bus = max(_SWITCH_BASE + s, bus + 1)
        while (0, bus) in taken:
            bus += 1
        taken.add((0, bus))
        switch_pci.append(PciAddress(0, bus, 0))
    return gpu_pci, switch_pci


def problem(gpu_pci: list[PciAddress], switch_pci: list[PciAddress]) -> tuple[str, str] | None:
    """("gpus" or "switches", what is wrong) for the first impossible or shared address."""
    seen: dict[str, str] = {}
    devices = [("gpus", f"GPU {i}", a) for i, a in enumerate(gpu_pci)] + \
        [("switches", f"NVSwitch {i}", a) for i, a in enumerate(switch_pci)]
    for field, name, address in devices:
        if not 0 <= address.bus <= MAX_BUS:
            return field, (f"{name} would need PCI bus 0x{address.bus:X}, above 0x{MAX_BUS:X}: "
                           "expected fewer devices in the node")
        if address.bus_id in seen:
            return field, (f"{name} would share PCI bus id {address.bus_id} with "
                           f"{seen[address.bus_id]}, expected unique bus ids")
        seen[address.bus_id] = name
    return None
