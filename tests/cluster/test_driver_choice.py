"""`fakegpu cluster up --driver` (and the pytest plugin's --fakegpu-driver) choose who the
plugins of a new cluster are, on either provider (issue 13)."""

from __future__ import annotations

import pytest

from fakegpu.cli import build_parser
from fakegpu.cluster import driver_name, get_provider
from fakegpu.errors import InvalidInput


@pytest.mark.parametrize("provider", ["embedded", "kind"])
@pytest.mark.parametrize(("driver", "name"), [("fakegpu", "gpu.fakegpu.dev"),
                                              ("nvidia", "gpu.nvidia.com")])
def test_the_provider_runs_the_plugins_as_the_chosen_driver(provider: str, driver: str,
                                                            name: str) -> None:
    clusters = get_provider(provider, driver=driver)
    assert clusters.provider.driver == name  # type: ignore[attr-defined]


def test_an_unknown_driver_is_bad_input() -> None:
    with pytest.raises(InvalidInput, match="unknown driver 'amd'"):
        driver_name("amd")


def test_cluster_up_takes_the_driver() -> None:
    args = build_parser().parse_args(["cluster", "up", "--driver", "nvidia"])
    assert args.driver == "nvidia"
    assert build_parser().parse_args(["cluster", "up"]).driver == "fakegpu"
