"""Fixtures the e2e suites share (the cluster fixtures come from fakegpu.pytest_plugin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import faults, nics


@pytest.fixture
def fault_guard(fakegpu_cluster: ClusterInfo) -> Iterator[list[tuple[str, int]]]:
    """Append (node, GPU index) for each fault a test injects: every fault of those GPUs is
    cleared afterwards whatever happened, since the suites of a session share the cluster."""
    injected: list[tuple[str, int]] = []
    yield injected
    for node, gpu in injected:
        faults.clear(fakegpu_cluster, node, gpu)


@pytest.fixture
def nic_words(fakegpu_cluster: ClusterInfo) -> nics.NicWords:
    """The words of the cluster's NIC driver (fakegpu's or DRANET's); the NIC suites skip on a
    cluster that runs none (--fakegpu-nic-driver none), saying so."""
    found = nics.words(fakegpu_cluster)
    if found is None:
        pytest.skip(f"cluster {fakegpu_cluster.name} runs no NIC driver "
                    "(--fakegpu-nic-driver none)")
    return found
