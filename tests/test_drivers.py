"""fakegpu.drivers: the driver names, spelled here as the published contract (NVIDIA's
manifests select gpu.nvidia.com; users' claims select gpu.fakegpu.dev)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fakegpu import drivers
from fakegpu.computedomain.names import for_cd_driver, for_gpu_driver


def test_the_names_and_choice_keys() -> None:
    assert drivers.FAKEGPU == "gpu.fakegpu.dev"
    assert drivers.NVIDIA == "gpu.nvidia.com"
    assert drivers.CHOICES == {"fakegpu": "gpu.fakegpu.dev", "nvidia": "gpu.nvidia.com"}
    assert drivers.by_key(drivers.DEFAULT_KEY) == drivers.DEFAULT


@pytest.mark.parametrize("key", ["fakegpu", "nvidia"])
def test_a_key_and_its_driver_map_both_ways(key: str) -> None:
    assert drivers.key_of(drivers.by_key(key)) == key


def test_the_nic_driver_choices() -> None:
    """--nic-driver: fakegpu's NIC driver, DRANET's name, or none ("": no NIC plugin)."""
    assert drivers.NIC_CHOICES == {"fakegpu": "nic.fakegpu.dev", "dranet": "dra.net", "none": ""}
    assert drivers.nic_by_key(drivers.NIC_DEFAULT_KEY) == drivers.NIC
    with pytest.raises(ValueError, match=r"unknown NIC driver choice 'sriov' .*fakegpu, dranet"):
        drivers.nic_by_key("sriov")


def test_an_unknown_key_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown driver choice 'amd' .*fakegpu, nvidia"):
        drivers.by_key("amd")


def test_only_nvidias_name_is_nvidia_compatible() -> None:
    assert drivers.is_nvidia("gpu.nvidia.com")
    assert not drivers.is_nvidia("gpu.fakegpu.dev")
    assert not drivers.is_nvidia("gpu.acme.com")
    assert drivers.key_of("gpu.acme.com") == "fakegpu"  # fakegpu's plugin under another name
    assert drivers.is_nvidia_key("nvidia") and not drivers.is_nvidia_key("fakegpu")


@pytest.mark.parametrize(("driver", "mig", "config", "cd"), [
    ("gpu.fakegpu.dev", "mig.fakegpu.dev", "resource.fakegpu.dev/v1beta1",
     "compute-domain.fakegpu.dev"),
    ("gpu.nvidia.com", "mig.nvidia.com", "resource.nvidia.com/v1beta1",
     "compute-domain.nvidia.com"),
    # Another name is fakegpu's plugin: it reads fakegpu's configs, its MIG class follows it.
    ("gpu.acme.com", "mig.acme.com", "resource.fakegpu.dev/v1beta1", "compute-domain.acme.com"),
])
def test_the_derived_names(driver: str, mig: str, config: str, cd: str) -> None:
    assert drivers.mig_class(driver) == mig
    assert drivers.config_api_version(driver) == config
    assert drivers.compute_domain_driver(driver) == cd
    assert for_gpu_driver(driver).driver == cd
    assert for_cd_driver(cd) == for_gpu_driver(driver)


def test_the_module_is_ground_floor() -> None:
    # Everything imports it, so it may import nothing of fakegpu above errors.
    tree = ast.parse(Path(drivers.__file__).read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("fakegpu")} <= {"fakegpu.errors"}
