from __future__ import annotations

from pathlib import Path

from fakegpu.plugin.discovery import normalize_bus_id, pcie_root
from fakegpu.plugin.slices import semver


def test_bus_id_in_sysfs_form() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("00000001:C1:00.0") == "0001:c1:00.0"


def test_pcie_root_from_sysfs_and_fallback(tmp_path: Path) -> None:
    real = tmp_path / "devices" / "pci0000:17" / "0000:17:00.0" / "0000:18:00.0"
    real.mkdir(parents=True)
    (tmp_path / "bus").mkdir()
    (tmp_path / "bus" / "0000:18:00.0").symlink_to(real)
    assert pcie_root("0000:18:00.0", str(tmp_path / "bus")) == "pci0000:17"
    assert pcie_root("0000:3b:00.0", str(tmp_path / "bus")) == "pci0000:3b"


def test_semver_strips_leading_zeros() -> None:
    assert semver("580.159.03") == "580.159.3"
    assert semver("9.0") == "9.0.0"
    assert semver("13") == "13.0.0"
