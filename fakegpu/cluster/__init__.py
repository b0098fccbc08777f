"""Cluster providers: real Kubernetes clusters for the DRA test kit."""

from __future__ import annotations

from fakegpu.cluster.provider import ClusterInfo, NodeInfo, Provider
from fakegpu.errors import InvalidInput

PROVIDERS = ("embedded", "kind")


def get_provider(name: str = "embedded") -> Provider:
    """The provider called ``name``; its module is imported only when asked for."""
    if name == "embedded":
        from fakegpu.cluster.embedded import EmbeddedProvider

        return EmbeddedProvider()
    if name == "kind":
        from fakegpu.cluster.kind.provider import KindProvider

        return KindProvider()
    raise InvalidInput(f"unknown cluster provider {name!r} (known: {', '.join(PROVIDERS)})")


__all__ = ["ClusterInfo", "NodeInfo", "Provider", "get_provider"]
