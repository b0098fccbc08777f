"""Spot facts in the hardware catalog against public readings (see catalog/*.yaml)."""

from __future__ import annotations

import pytest

from fakegpu.topology import catalog


def test_every_required_product_is_present() -> None:
    assert {"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "B200",
            "GB200"} <= set(catalog.products())


def test_h200_matches_the_real_card() -> None:
    h200 = catalog.products()["H200-SXM-141GB"]
    assert (h200.name, h200.memory_mib, h200.sm_count) == ("NVIDIA H200", 143771, 132)
    assert h200.cuda_compute_capability == (9, 0)


def test_h100_mig_table_has_nvml_and_nvidia_smi_ids() -> None:
    mig = catalog.products()["H100-SXM5-80GB"].mig
    assert mig is not None
    rows = {p.name: (p.id, p.smi_id, p.instance_count, p.sm_count) for p in mig.profiles}
    assert rows["1g.10gb"] == (0, 19, 7, 16)
    assert rows["1g.10gb+me"] == (7, 20, 1, 16)
    assert rows["1g.20gb"] == (9, 15, 4, 26)
    assert rows["3g.40gb"] == (2, 9, 2, 60)
    assert rows["7g.80gb"] == (4, 0, 1, 132)
    seven = mig.profile("7g.80gb")
    assert seven is not None and seven.memory_mib == round(79.25 * 1024)
    assert [(p.start, p.size) for p in seven.placements] == [(0, 8)]


@pytest.mark.parametrize("key", sorted(catalog.products()))
def test_mig_tables_are_self_consistent(key: str) -> None:
    product = catalog.products()[key]
    assert product.mig is not None
    for profile in product.mig.profiles:
        assert profile.memory_mib <= product.memory_mib
        assert profile.sm_count <= product.sm_count
        for placement in profile.placements:
            assert placement.start + placement.size <= product.mig.memory_slices
        # Every instance the table says fits must have its own placement.
        assert len({p.start for p in profile.placements}) >= profile.instance_count


def test_lookup_is_case_insensitive_and_none_for_unknown() -> None:
    assert catalog.lookup("gb200") is catalog.products()["GB200"]
    assert catalog.lookup("H900") is None


def test_gb200_superchip_facts() -> None:
    gb200 = catalog.products()["GB200"]
    assert gb200.nvlink is not None and gb200.nvlink.generation == 5
    assert gb200.nvlink.links_per_gpu * gb200.nvlink.link_bandwidth_gbps == 1800
    assert gb200.baseboard is not None and gb200.baseboard.gpus_per_board == 2
    assert "memory_mib" in gb200.uncertain
