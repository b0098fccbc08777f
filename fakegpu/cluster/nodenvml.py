"""A running cluster's node NVML, by cluster and node name: faults and ``smi`` on any provider.

Users name a cluster and a node; where that node's NVML state file lives (a host file on the
embedded provider, a file its fake node pod keeps on kind) is the provider's business
(``Provider.node_nvml``). The cluster is looked up among the providers unless one is named.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fakegpu.errors import InvalidInput

if TYPE_CHECKING:
    from fakegpu.cluster.lifecycle import Lifecycle


def find(name: str, provider: str | None = None) -> Lifecycle:
    """The provider running cluster ``name`` (``provider`` if given, else the one that has
    it: ``provider_of``); InvalidInput if there is none."""
    from fakegpu.cluster import get_provider, provider_of

    found = provider or provider_of(name)
    if found is None or get_provider(found).status(name) is None:
        where = f"provider {provider}" if provider else "any provider"
        raise InvalidInput(f"no cluster {name!r} on {where} (see `fakegpu cluster status`)")
    return get_provider(found)


def run(name: str, node: str, args: Sequence[str], provider: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``fakegpu <args>`` against node ``node``'s NVML state; output and exit code as is."""
    return find(name, provider).node_nvml(name, node, args)


def fault_args(action: str, gpu: int | None, kind: str | None, value: int | None,
               nic: str | None = None) -> list[str]:
    """The ``fakegpu fault`` command line for one injection or clearing (``action``) on a
    GPU (NVML index) or, with ``nic``, a NIC (interface name)."""
    args = ["fault", action, *(["--nic", nic] if nic is not None else ["--gpu", str(gpu)])]
    if kind is not None:
        args.append(kind)
    if value is not None:
        args.append(str(value))
    return args
