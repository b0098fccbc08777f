"""Property: random and mutated input only ever yields TopologyError, never a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import parse_bytes
from fakegpu.topology.packaged import FIXTURES

FILES = sorted(FIXTURES.glob("*.yaml"))
SEEDS = [yaml.safe_load(p.read_text()) for p in FILES]

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                     st.floats(allow_nan=True), st.text(max_size=20),
                     st.sampled_from(["H100-SXM5-80GB", "GB200", "3g.40gb", "fabric",
                                      "switched", "xid", "n-{0..3}", "{1..0}"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def _check(data: bytes) -> None:
    try:
        parse_bytes(data, "fuzz.yaml")
    except TopologyError as err:
        assert err.lines() and all("\n" not in line for line in err.lines())


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _check(data)


def _mutate(tree: Any, path: list[int], value: Any) -> Any:
    """Replace the node reached by following ``path`` (indices mod size) with ``value``."""
    if not path or not isinstance(tree, (dict, list)) or not tree:
        return value
    if isinstance(tree, dict):
        key = sorted(tree, key=str)[path[0] % len(tree)]
        return {**tree, key: _mutate(tree[key], path[1:], value)}
    i = path[0] % len(tree)
    return [*tree[:i], _mutate(tree[i], path[1:], value), *tree[i + 1:]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.lists(st.integers(0, 50), max_size=6), _values)
def test_mutated_fixtures(seed: Any, path: list[int], value: Any) -> None:
    _check(yaml.safe_dump(_mutate(seed, path, value)).encode())


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(FILES), st.integers(0, 4000), st.binary(min_size=1, max_size=4))
def test_byte_edits_of_fixtures(path: Path, at: int, junk: bytes) -> None:
    data = path.read_bytes()
    at %= len(data)
    _check(data[:at] + junk + data[at + len(junk):])
