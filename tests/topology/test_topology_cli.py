"""The ``fakegpu topology`` commands, run in-process through the real parser."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fakegpu.cli import main
from fakegpu.topology.errors import MAX_LINES
from fakegpu.topology.packaged import FIXTURES


def test_validate_all_fixtures_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in FIXTURES.glob("*.yaml"))
    assert main(["topology", "validate", *files]) == 0
    assert capsys.readouterr().err == ""


def test_validate_invalid_exits_2_with_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (Path(__file__).resolve().parent / "invalid").glob("*.yaml")
                   if p.name != "expected.txt")
    assert main(["topology", "validate", *files]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(files)
    assert "Traceback" not in "\n".join(err)
    assert [line.split(": ")[0] for line in err] == files


def test_show_json_nvl72(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "show", str(FIXTURES / "gb200-nvl72.yaml"), "-o",
                 "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpus = [g for n in data["nodes"] for g in n["gpus"]]
    assert len(data["nodes"]) == 18 and len(gpus) == 72
    assert len({g["uuid"] for g in gpus}) == 72
    assert len({g["clique_id"] for g in gpus}) == 1
    assert {g["memory_mib"] for g in gpus} == {189471}
    for key in ("index", "uuid", "name", "memory_mib", "pci_bus_id", "clique_id",
                "mig_enabled"):
        assert key in gpus[0]


def test_show_table_has_gpu_list_and_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "show", str(FIXTURES / "dgx-h100.yaml")]) == 0
    out = capsys.readouterr().out
    assert "GPU 7: NVIDIA H100 80GB HBM3 (UUID: GPU-" in out
    matrix = [line for line in out.splitlines() if line.startswith("GPU0\t")]
    assert matrix and matrix[0].split("\t")[1:9] == [" X "] + ["NV18"] * 7


def test_show_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    assert main(["topology", "show", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(str(bad))


@pytest.mark.parametrize("argv", [["topology", "--help"], ["topology", "validate", "--help"],
                                  ["topology", "show", "--help"], ["--version"]])
def test_help_and_version_exit_0(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0


def test_verbose_is_accepted_after_the_command() -> None:
    assert main(["topology", "validate", "-v", str(FIXTURES / "dgx-a100.yaml")]) == 0


GOOD = "name: t\nnodes: [{name: a, gpus: {product: B200, count: 1}}]\n"


@pytest.mark.timeout(60)
def test_validate_refuses_a_fifo_without_waiting(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "topology.yaml"
    os.mkfifo(fifo)  # no writer: opening it for reading used to block forever
    assert main(["topology", "validate", str(fifo)]) == 2
    assert capsys.readouterr().err == f"{fifo}: is a FIFO, expected a YAML file\n"


def test_a_newline_in_a_file_name_stays_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "a\nb.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "c\nd.yaml"
    bad.write_text("name: [\n")
    assert main(["topology", "validate", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == f"{tmp_path}/a\\nb.yaml: ok (1 nodes, 1 GPUs)\n"
    assert len(err.splitlines()) == 1 and err.startswith(f"{tmp_path}/c\\nd.yaml: ")


def test_thousands_of_problems_print_a_bounded_count(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "keys.yaml"
    bad.write_text(GOOD + "".join(f"k{i}: 1\n" for i in range(5000)))
    assert main(["topology", "validate", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == MAX_LINES + 1
    assert err[-1] == f"{bad}: ... and {5000 - MAX_LINES} more problems"


def test_a_closed_pipe_ends_quietly() -> None:
    # `fakegpu topology show F -o json | head -1`: the reader leaves after one line; the
    # 5 MB of fleet-1000's JSON cannot fit in a pipe, so writing on must meet EPIPE.
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "topology", "show",
                             str(FIXTURES / "fleet-1000.yaml"), "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""
