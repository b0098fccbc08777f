"""``fakegpu topology show`` output: JSON, or text like ``nvidia-smi -L`` + ``topo -m``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .model import Gpu, LinkState, Node, PciAddress, Topology


def to_json(topology: Topology) -> dict[str, Any]:
    return {
        "name": topology.name,
        "seed": topology.seed,
        "source": topology.source,
        "driver": {"version": topology.driver.version,
                   "cuda_version": topology.driver.cuda_version,
                   "nvml_version": topology.driver.nvml_version},
        "network": {"gbps_per_gpu": topology.network.gbps_per_gpu},
        "nodes": [_node_json(n) for n in topology.nodes],
    }


def _node_json(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "index": node.index,
        "system": node.system,
        "simulated": node.simulated,
        "nvswitches": [{"index": s.index, "uuid": s.uuid, "pci_bus_id": s.pci.bus_id,
                        "links": s.links} for s in node.nvswitches],
        "gpus": [_gpu_json(g) for g in node.gpus],
    }


def _gpu_json(gpu: Gpu) -> dict[str, Any]:
    fabric = gpu.fabric
    return {
        "index": gpu.index,
        "minor": gpu.minor,
        "uuid": gpu.uuid,
        "name": gpu.product.name,
        "product": gpu.product.key,
        "memory_mib": gpu.product.memory_mib,
        "pci_bus_id": gpu.pci.bus_id,
        "numa_node": gpu.numa_node,
        "serial": gpu.serial,
        "module_id": gpu.module_id,
        # The form NVIDIA's DRA driver publishes; null when the GPU is in no fabric.
        "clique_id": fabric.clique if fabric else None,
        "fabric": None if fabric is None else {
            "cluster_uuid": fabric.cluster_uuid, "clique_id": fabric.clique_id,
            "state": fabric.state.value, "health": fabric.health.value},
        "nvlinks": sum(1 for link in gpu.nvlinks if link.state is LinkState.UP),
        "mig_enabled": gpu.mig.enabled,
        "mig_instances": [{"profile": m.profile, "placement": m.placement_start}
                          for m in gpu.mig.instances],
        "faults": [{"kind": f.kind.value, "value": f.value} for f in gpu.faults],
    }


def to_table(topology: Topology) -> str:
    lines = [f"# {topology.name}: {len(topology.nodes)} node(s), {topology.gpu_count} GPU(s), "
             f"driver {topology.driver.version}"]
    for node in topology.nodes:
        lines.append("")
        lines.append(f"== {node.name} ({node.system}, {len(node.gpus)} GPUs, "
                     f"{len(node.nvswitches)} NVSwitches)")
        for gpu in node.gpus:
            lines.append(f"GPU {gpu.index}: {gpu.product.name} (UUID: {gpu.uuid})")
            for i, inst in enumerate(gpu.mig.instances):
                lines.append(f"  MIG {inst.profile:<12} Device {i}: (placement "
                             f"{inst.placement_start})")
        cliques = sorted({g.fabric.clique for g in node.gpus if g.fabric})
        if cliques:
            lines.append(f"clique: {', '.join(cliques)}")
        lines.append("")
        lines.extend(_matrix(node))
    return "\n".join(lines) + "\n"


def _matrix(node: Node) -> list[str]:
    heads = [f"GPU{g.index}" for g in node.gpus]
    rows = ["\t" + "\t".join(heads) + "\tNUMA Affinity"]
    # Each GPU's up links counted once per node, not once per pair: a 16-GPU node of 18 links
    # each made the table of a 1,024-node fleet take seconds (and the fuzz target time out).
    up = {g.index: Counter(link.remote_pci for link in g.nvlinks if link.state is LinkState.UP)
          for g in node.gpus}
    for a in node.gpus:
        cells = [" X " if a is b else _relation(a, b, up) for b in node.gpus]
        rows.append(f"GPU{a.index}\t" + "\t".join(cells) + f"\t{a.numa_node}")
    return rows


def _relation(a: Gpu, b: Gpu, up: dict[int, Counter[PciAddress]]) -> str:
    """``NV<n>``: n up links of ``a`` reach a switch ``b`` also uses; else PCIe path."""
    theirs = up[b.index]
    shared = sum(n for remote, n in up[a.index].items() if remote in theirs)
    if shared:
        return f"NV{shared}"
    return "NODE" if a.numa_node == b.numa_node else "SYS"
