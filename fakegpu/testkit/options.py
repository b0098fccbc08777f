"""The fakegpu e2e options, read and validated once from pytest's (``fakegpu.pytest_plugin``
declares them); a bad value raises ``pytest.UsageError``, which pytest prints as one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fakegpu.topology import packaged

REPORTS_SUBDIR = Path("reports") / "fakegpu-e2e"


@dataclass(frozen=True)
class Options:
    provider: str
    k8s_version: str | None  # as given (None: the provider's default); validated
    topology: Path
    keep_cluster: bool
    cluster_name: str
    reports_dir: Path
    driver: str = "fakegpu"  # fakegpu.cluster.DRIVERS: who the plugins of the cluster are
    image_aliases: tuple[str, ...] = ()  # normalized names the workload image also gets
    nic_driver: str = "fakegpu"  # drivers.NIC_CHOICES: who the cluster's NIC plugins are

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        """Read and validate the fakegpu options; a bad value raises pytest.UsageError."""
        provider = str(config.getoption("fakegpu_provider"))
        version = config.getoption("fakegpu_k8s_version")
        if version is not None:
            from fakegpu.cluster.artifacts import binaries
            from fakegpu.errors import FakegpuError

            try:
                binaries.resolve_version(str(version))
            except FakegpuError as err:
                raise pytest.UsageError(f"--fakegpu-k8s-version: {err}") from err
        given = config.getoption("fakegpu_topology")
        if given is None:
            # The default is checked when a cluster is needed, not here: a run without e2e
            # tests (or an installed fakegpu without the source tree) must not fail over it.
            topology = packaged.default_topology()
        else:
            from fakegpu.errors import InvalidInput

            try:
                topology = packaged.resolve_topology(
                    str(given), base=config.invocation_params.dir).resolve()
            except InvalidInput as err:
                raise pytest.UsageError(f"--fakegpu-topology: {err}") from None
        name = str(config.getoption("fakegpu_cluster_name"))
        from fakegpu.cluster.names import RULE, validate_name
        from fakegpu.errors import InvalidInput

        try:
            validate_name(name)  # the providers' own rule: a name they refuse fails here
        except InvalidInput:
            raise pytest.UsageError(f"--fakegpu-cluster-name: {name!r} must be {RULE}") from None
        from fakegpu.cluster import imagealiases

        try:
            aliases = tuple(imagealiases.normalize_all(
                config.getoption("fakegpu_image_alias") or ()))
        except InvalidInput as err:
            raise pytest.UsageError(f"--fakegpu-image-alias: {err}") from None
        return cls(provider=provider, k8s_version=None if version is None else str(version),
                   topology=topology, keep_cluster=bool(config.getoption("fakegpu_keep_cluster")),
                   cluster_name=name, reports_dir=config.rootpath / REPORTS_SUBDIR,
                   driver=str(config.getoption("fakegpu_driver")), image_aliases=aliases,
                   nic_driver=str(config.getoption("fakegpu_nic_driver")))
