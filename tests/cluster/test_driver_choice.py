"""`fakegpu cluster up --driver` (and the pytest plugin's --fakegpu-driver) choose who the
plugins of a new cluster are, on either provider (issue 13)."""

from __future__ import annotations

import pytest

from fakegpu.cli import build_parser
from fakegpu.cluster import driver_name, get_provider
from fakegpu.cluster.lifecycle import load_spec
from fakegpu.errors import InvalidInput
from fakegpu.topology.packaged import FIXTURES

TOPOLOGY = FIXTURES / "dgx-h100.yaml"


@pytest.mark.parametrize("provider", ["embedded", "kind"])
@pytest.mark.parametrize(("driver", "name"), [("fakegpu", "gpu.fakegpu.dev"),
                                              ("nvidia", "gpu.nvidia.com")])
def test_the_provider_runs_the_plugins_as_the_chosen_driver(provider: str, driver: str,
                                                            name: str) -> None:
    spec = load_spec("c1", TOPOLOGY, None, driver=driver)
    assert spec.driver == name
    # What the provider records of the new cluster (and its plugins are started with).
    bringup = get_provider(provider).provider.provision(spec)
    assert bringup.state.driver == name  # type: ignore[attr-defined]


def test_an_unknown_driver_is_bad_input() -> None:
    with pytest.raises(InvalidInput, match="unknown driver 'amd'"):
        driver_name("amd")
    with pytest.raises(InvalidInput, match="unknown driver 'amd'"):
        load_spec("c1", TOPOLOGY, None, driver="amd")


def test_cluster_up_takes_the_driver() -> None:
    args = build_parser().parse_args(["cluster", "up", "--driver", "nvidia"])
    assert args.driver == "nvidia"
    assert build_parser().parse_args(["cluster", "up"]).driver == "fakegpu"
