"""Hostile topology inputs found by probing (issue 15): each one line, never a traceback.

Every input here is the issue's own; no test times anything (speed is measured in
docs/reliability.md): a regression shows as a wrong message, too many lines or a crash.
"""

from __future__ import annotations

import pytest

from fakegpu.nvml import state
from fakegpu.topology import yamlsafe
from fakegpu.topology.errors import MAX_LINES, MAX_MESSAGE, TopologyError
from fakegpu.topology.load import parse_topology
from fakegpu.topology.model import MAX_NAME_BYTES
from fakegpu.topology.yamlsafe import MAX_VALUES

NODES = "nodes: [{name: a, gpus: {product: B200, count: 1}}]\n"


def _error(text: str) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse_topology(text, "t.yaml")
    return info.value.lines()


def _one_line(text: str) -> str:
    lines = _error(text)
    assert len(lines) == 1, lines
    assert lines[0].startswith("t.yaml: ") and "\n" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("tagged", ["!!timestamp x", "!!bool maybe", '!!float ""', "!!int _",
                                    "!!int +"])
def test_explicit_tags_are_refused_with_the_field(tagged: str) -> None:
    # PyYAML's constructors raised AttributeError/KeyError/IndexError on these.
    line = _one_line(f"name: {tagged}\n{NODES}")
    tag = tagged.split()[0]
    assert line == f"t.yaml: name: has the YAML tag {tag}, expected a plain value " \
                   "(tags are not supported)"


def test_a_tag_deep_in_the_file_names_its_path() -> None:
    line = _one_line("name: t\nnodes: [{name: a, gpus: {product: B200, count: !!int 1}}]\n")
    assert line.startswith("t.yaml: nodes[0].gpus.count: has the YAML tag !!int")


def test_node_range_with_5000_digit_bounds() -> None:
    big = "9" * 5000
    line = _one_line(f"name: t\nnodes: [{{name: 'n-{{{big}..{big}}}', "
                     "gpus: {product: B200, count: 1}}]\n")
    assert "nodes[0].name: range bounds have more than 9 digits" in line
    assert len(line) < 200  # the 5000 digits are not echoed


@pytest.mark.parametrize("seed", ["0x" + "f" * 4500, "9" * 5000])
def test_integers_beyond_64_bits(seed: str) -> None:
    line = _one_line(f"name: t\nseed: {seed}\n{NODES}")
    assert line.startswith("t.yaml: seed: is an integer of ")
    assert "expected at most 64" in line


def test_half_a_million_list_items_are_refused_while_reading() -> None:
    text = "name: t\nnodes: [" + ",".join(["1"] * 500_000) + "]\n"
    assert len(text) < 1 << 20  # under the size cap: the value count refuses it
    line = _one_line(text)
    assert f"more than {MAX_VALUES} YAML values" in line


def test_sixty_thousand_unknown_keys_print_one_line() -> None:
    text = f"name: t\n{NODES}" + "".join(f"k{i}: 1\n" for i in range(60_000))
    assert len(text) < 1 << 20
    assert f"more than {MAX_VALUES} YAML values" in _one_line(text)


def test_many_problems_print_at_most_max_lines_and_a_count() -> None:
    text = f"name: t\n{NODES}" + "".join(f"k{i}: 1\n" for i in range(1000))
    lines = _error(text)
    assert len(lines) == MAX_LINES + 1
    assert lines[0] == "t.yaml: k0: unknown field, expected one of name, seed, driver, " \
                       "network, fabrics, nodes"
    assert lines[-1] == f"t.yaml: ... and {1000 - MAX_LINES} more problems"


def test_merge_keys_count_their_expansion() -> None:
    # Each level merges the one before twice under new keys: 2^20 values if copied.
    levels = ["l0: &l0 {a: 1, b: 2}"]
    for i in range(1, 21):
        levels.append(f"l{i}: &l{i} {{x: {{<<: *l{i - 1}}}, y: {{<<: *l{i - 1}}}}}")
    text = "name: t\n" + NODES + "extra:\n" + "".join(f"  {lv}\n" for lv in levels)
    assert "alias bomb" in _one_line(text)


def test_merge_keys_still_work() -> None:
    text = ("name: t\ngpu: &gpu {product: B200, count: 2}\n"
            "nodes: [{name: a, gpus: {<<: *gpu, count: 1}}]\n")
    # `gpu` is an unknown top-level field; the node's merged mapping is read as YAML says.
    lines = _error(text)
    assert lines == ["t.yaml: gpu: unknown field, expected one of name, seed, driver, "
                     "network, fabrics, nodes"]


def test_many_faults_are_refused_before_any_node_is_stamped() -> None:
    faults = ", ".join(["{gpu: 0, kind: ecc-dbe}"] * 5000)
    text = f"name: t\nnodes: [{{name: 'n{{0..1023}}', gpus: {{product: B200, count: 8}}, " \
           f"faults: [{faults}]}}]\n"
    assert "nodes[0].faults: lists 5000 faults, expected at most 256" in _one_line(text)


def test_many_bad_ranges_report_each_without_expanding() -> None:
    items = ", ".join(["{name: 'N{0..1023}', gpus: {product: B200, count: 1}}"] * 3000)
    lines = _error(f"name: t\nnodes: [{items}]\n")
    assert lines[0] == "t.yaml: nodes[0].name: 'N0' is not a valid node name, expected " \
                       "lowercase letters, digits, '-' and '.' (at most 63)"
    assert lines[-1] == f"t.yaml: ... and {3000 - MAX_LINES} more problems"


def test_lone_surrogate_escape_is_refused() -> None:
    # libyaml refuses the escape; the pure-Python parser makes a string no file can hold.
    line = _one_line(f'name: "a\\ud800"\n{NODES}')
    assert "surrogate" in line or "invalid Unicode character escape" in line


@pytest.mark.parametrize(("text", "expected"), [
    (f'name: "a\\ud800"\n{NODES}', "name: holds a lone surrogate escape"),
    (f"name: !!timestamp x\n{NODES}", "name: has the YAML tag !!timestamp"),
    (f"name: t\nseed: 0x{'f' * 4500}\n{NODES}", "seed: is an integer of 18000 bits"),
    ("name: t\nnodes: [" + ",".join(["1"] * 60_000) + "]\n", "YAML values"),
])
def test_pure_python_parser_has_the_same_guards(monkeypatch: pytest.MonkeyPatch, text: str,
                                                expected: str) -> None:
    """A PyYAML without libyaml parses in Python: every guard holds there too."""
    monkeypatch.setattr(yamlsafe, "LOADER", yamlsafe._PyLoader)
    assert expected in _one_line(text)


def test_name_limit_is_the_state_files() -> None:
    assert state.Header.topology.size == MAX_NAME_BYTES + 1  # NUL-terminated


def test_forty_emoji_name_is_refused_by_bytes() -> None:
    name = "\U0001f600" * 40  # 40 characters, 160 bytes
    line = _one_line(f"name: {name}\n{NODES}")
    assert line == f"t.yaml: name: is 160 bytes in UTF-8, expected at most {MAX_NAME_BYTES}"


def test_longest_name_renders_whole() -> None:
    name = "\U0001f600" * 15 + "abc"  # 63 bytes
    topology = parse_topology(f"name: {name}\n{NODES}")
    header = state.Header.from_buffer_copy(state.render_bytes(topology, topology.nodes[0]))
    assert header.topology.decode() == name


A100 = "A100-SXM4-80GB"


def test_sixteen_a100_get_unique_bus_ids_beside_their_switches() -> None:
    # The invented GPU buses used to land on the baseboard's NVSwitch C6:00.0.
    node = parse_topology(f"name: t\nnodes: [{{name: a, gpus: {{product: {A100}, "
                          "count: 16}}]\n").nodes[0]
    ids = [g.pci.bus_id for g in node.gpus] + [s.pci.bus_id for s in node.nvswitches]
    assert len(node.nvswitches) == 6 and len(ids) == len(set(ids)) == 22
    assert all(0 <= g.pci.bus <= 0xFF for g in node.gpus)
    buses = [g.pci.bus for g in node.gpus]
    assert buses == sorted(buses)  # NVML index order is bus order


def test_sixty_four_switches_beside_sixteen_gpus_are_refused() -> None:
    line = _one_line(f"name: t\nnodes: [{{name: a, gpus: {{product: {A100}, count: 16}}, "
                     "nvlink: {mode: switched, switches: 64}}]\n")
    assert line.startswith("t.yaml: nodes[0].nvlink.switches: 16 GPUs and 64 NVSwitches do "
                           "not fit: NVSwitch ")
    assert "above 0xFF" in line


def test_switches_that_fit_get_unique_buses() -> None:
    node = parse_topology(f"name: t\nnodes: [{{name: a, gpus: {{product: {A100}, count: 16}}, "
                          "nvlink: {mode: switched, switches: 30}}]\n").nodes[0]
    ids = [g.pci.bus_id for g in node.gpus] + [s.pci.bus_id for s in node.nvswitches]
    assert len(ids) == len(set(ids)) == 46
    assert max(s.pci.bus for s in node.nvswitches) <= 0xFF


@pytest.mark.parametrize(("text", "field"), [
    ('name: t\nnodes: [{name: "a\\n", gpus: {product: B200, count: 1}}]\n', "nodes[0].name"),
    ('name: t\ndriver: {version: "580.95.05\\n"}\n' + NODES, "driver.version"),
])
def test_a_trailing_newline_is_not_a_valid_name(text: str, field: str) -> None:
    # `$` matches before a final newline: "a\n" passed as a Kubernetes node name.
    assert _one_line(text).startswith(f"t.yaml: {field}: ")


@pytest.mark.parametrize("name", ['"a\\0b"', '"a\\nb"', '"\\e[31mred"'])
def test_topology_name_is_printable_text(name: str) -> None:
    # A NUL cut the state file's copy of the name short without a word.
    assert _one_line(f"name: {name}\n{NODES}").startswith("t.yaml: name: is ")


def test_a_huge_echoed_value_makes_a_short_line() -> None:
    line = _one_line(f"name: t\nnodes: [{{name: a, gpus: {{product: {'x' * 900_000}, "
                     "count: 1}}]\n")
    assert line.startswith("t.yaml: nodes[0].gpus.product: unknown product 'xxx")
    assert len(line) < MAX_MESSAGE + 100 and line.endswith(" more characters)")
