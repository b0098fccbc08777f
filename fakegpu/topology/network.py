"""The ``network`` section of a topology: the node-to-node (scale-out) network.

GPUs that cannot reach each other over NVLink (other nodes without a shared multi-node NVLink
domain) talk over the nodes' InfiniBand/Ethernet NICs. GB200 and DGX systems give each GPU its
own NIC, rated about 400 Gb/s (ConnectX-7, REFERENCE.md section 5), hence the default.
"""

from __future__ import annotations

from typing import Any

from .fields import Report
from .model import DEFAULT_NETWORK_GBPS_PER_GPU, Network

# One NIC per GPU: 1.6 Tb/s ports are announced; ten times that is surely a typo.
MAX_GBPS_PER_GPU = 16000.0


def parse(report: Report, raw: Any) -> Network | None:
    """``network: {gbps_per_gpu: N}`` (Gb/s per GPU, each direction) -> Network."""
    if raw is None:
        return Network()
    data = report.mapping(raw, "network", ("gbps_per_gpu",))
    if data is None:
        return None
    gbps = report.get(data, "gbps_per_gpu", "network", float,
                      default=DEFAULT_NETWORK_GBPS_PER_GPU)
    if gbps is None:
        return None
    if not 0 < gbps <= MAX_GBPS_PER_GPU:
        report.add("network.gbps_per_gpu", f"is {gbps:g}, expected a speed in Gb/s above 0 "
                                           f"and at most {MAX_GBPS_PER_GPU:g}")
        return None
    return Network(gbps_per_gpu=gbps)
