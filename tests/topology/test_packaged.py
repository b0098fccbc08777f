"""The packaged topologies and the one rule from ``--topology NAME|FILE`` to a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cli import main
from fakegpu.errors import InvalidInput
from fakegpu.topology import packaged
from fakegpu.topology.load import load_topology


def test_every_packaged_topology_loads_and_opens_with_a_one_line_summary() -> None:
    shipped = packaged.packaged()
    assert {p.name for p in shipped} >= {"dgx-h100", packaged.DEFAULT}
    for p in shipped:
        assert load_topology(p.path).name == p.name  # the name a user types is the file's own
        assert p.description.endswith("."), f"{p.name}: {p.description!r}"


def test_a_name_resolves_with_or_without_its_suffix() -> None:
    want = packaged.FIXTURES / "dgx-h100.yaml"
    assert packaged.resolve_topology("dgx-h100") == want
    assert packaged.resolve_topology("dgx-h100.yaml", base=Path("/nonexistent")) == want


def test_an_existing_file_wins_over_a_packaged_name(tmp_path: Path) -> None:
    own = tmp_path / "dgx-h100.yaml"
    own.write_text("name: mine\n")
    assert packaged.resolve_topology("dgx-h100.yaml", base=tmp_path) == own
    assert packaged.resolve_topology(own) == own


def test_a_relative_path_is_read_from_base(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "x.yaml").write_text("name: x\n")
    assert packaged.resolve_topology("t/x.yaml", base=tmp_path) == tmp_path / "t" / "x.yaml"


@pytest.mark.parametrize("given", ["nope", "nope.yaml", "sub/dgx-h100", "../fixtures/dgx-h100"])
def test_neither_a_file_nor_a_name_is_one_line_naming_it(given: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        packaged.resolve_topology(given, base=tmp_path)
    message = str(err.value)
    assert "\n" not in message and given in message and "dgx-h100" in message


def test_topology_list_prints_every_name_with_its_description(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "list"]) == 0
    rows = [line.split(None, 1) for line in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == packaged.names()
    assert all(r[1] == packaged.describe(packaged.path(r[0])) for r in rows)


def test_commands_take_a_name_where_they_take_a_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "show", "dgx-h100"]) == 0
    assert capsys.readouterr().out.startswith("# dgx-h100: 1 node(s), 8 GPU(s)")
    state = tmp_path / "s.bin"
    assert main(["nvml", "render", "--topology", "dgx-h100", "--state", str(state)]) == 0
    assert state.stat().st_size > 0


def test_topology_path_prints_the_file_a_name_stands_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "path", "gb200-mini"]) == 0
    assert capsys.readouterr().out == f"{packaged.FIXTURES / 'gb200-mini.yaml'}\n"
    assert main(["topology", "path", "no-such-topology"]) == 2
    assert "no-such-topology" in capsys.readouterr().err


def test_an_unknown_name_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "show", "no-such-topology"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-topology" in err
    with pytest.raises(SystemExit) as exit_:
        main(["nvml", "env", "--topology", "no-such-topology"])
    assert exit_.value.code == 2


def test_the_names_are_found_from_any_working_directory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert packaged.resolve_topology("gb200-mini").is_file()
