"""One shape for the whole CLI (issue 26): walked over the parser tree, so a command added
later is held to it too. Every visible option has help; a cluster is --cluster, a node
--node, a driver --driver; every command takes -v; what a command prints as data it prints
as -o table|json|yaml; the completion script is made from the same tree."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fakegpu.cli import build_parser, main, subcommands
from fakegpu.cli.completion import script
from fakegpu.topology.packaged import FIXTURES

# Spellings the one option of each concept replaces: accepted, never shown.
OLD = {"--name": "--cluster", "--node-name": "--node", "--driver-name": "--driver",
       "--format": "-o"}


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    root = build_parser()
    for parser in [root, *subcommands(root)]:
        yield parser.prog, parser


def _visible(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if action.help != argparse.SUPPRESS and not isinstance(
                action, argparse._SubParsersAction):
            yield action


def test_every_visible_option_and_argument_has_help() -> None:
    missing = [f"{prog} {'/'.join(a.option_strings) or a.dest}"
               for prog, parser in _commands() for a in _visible(parser) if not a.help]
    assert missing == []


def test_a_cluster_a_node_and_a_driver_are_spelled_one_way() -> None:
    wrong = []
    for prog, parser in _commands():
        for action in _visible(parser):
            for flag in action.option_strings:
                if flag in OLD:
                    wrong.append(f"{prog}: {flag} shown (spell it {OLD[flag]})")
            if action.dest in ("cluster", "name") and action.option_strings != ["--cluster"]:
                wrong.append(f"{prog}: the cluster as {action.option_strings or action.dest}")
            if action.dest in ("node", "node_name") and action.option_strings != ["--node"]:
                wrong.append(f"{prog}: the node as {action.option_strings or action.dest}")
            if action.dest in ("driver", "driver_name") and action.option_strings != ["--driver"]:
                wrong.append(f"{prog}: the driver as {action.option_strings or action.dest}")
    assert wrong == []


def test_every_command_takes_verbose() -> None:
    lacking = [prog for prog, parser in _commands()
               if {"-v", "--verbose"} - set(parser._option_string_actions)]
    assert lacking == []


def test_output_is_one_flag_with_the_three_formats() -> None:
    seen = []
    for prog, parser in _commands():
        for action in _visible(parser):
            if action.dest == "output":
                seen.append(prog)
                assert action.option_strings == ["-o", "--output"], prog
                assert tuple(action.choices or ()) == ("table", "json", "yaml"), prog
    assert {"fakegpu cluster status", "fakegpu smi", "fakegpu topology show",
            "fakegpu topology list"} <= set(seen)


@pytest.mark.parametrize(("old", "new"), [
    (["cluster", "status", "--name", "c1"], ["cluster", "status", "--cluster", "c1"]),
    (["cluster", "upgrade-plugin", "c1", "--to", "2"],
     ["cluster", "upgrade-plugin", "--cluster", "c1", "--to", "2"]),
    (["cluster", "node", "stop", "n1", "--name", "c1"],
     ["cluster", "node", "stop", "--node", "n1", "--cluster", "c1"]),
    (["plugin", "run", "--node-name", "n1", "--driver-name", "d.example.com"],
     ["plugin", "run", "--node", "n1", "--driver", "d.example.com"]),
    (["plugin", "run", "--nvidia-compatible"], ["plugin", "run", "--driver", "nvidia"]),
    (["plugin", "deviceclass", "--nvidia-compatible"],
     ["plugin", "deviceclass", "--driver", "nvidia"]),
    (["computedomain", "plugin", "--node-name", "n1"], ["computedomain", "plugin", "--node",
                                                        "n1"]),
    (["smi", "--format", "json"], ["smi", "-o", "json"]),
    (["cluster", "status", "--format", "text"], ["cluster", "status", "-o", "table"]),
])
def test_old_spellings_still_parse_as_the_new_ones(old: list[str], new: list[str]) -> None:
    parser = build_parser()
    assert vars(parser.parse_args(old)) == vars(parser.parse_args(new))


def test_cluster_up_takes_a_driver_by_key_or_by_name() -> None:
    parser = build_parser()
    assert parser.parse_args(["cluster", "up", "--driver", "gpu.nvidia.com"]).driver == "nvidia"
    assert parser.parse_args(["fleet", "run", "--kubeconfig", "k", "--topology", "fleet-small",
                              "--driver", "gpu.fakegpu.dev"]).driver == "fakegpu"


def test_node_stop_without_a_node_is_exit_2_on_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "node", "stop", "--cluster", "c1"]) == 2
    err = capsys.readouterr().err
    assert err == "fakegpu: --node NAME is required (a worker of the cluster)\n"


@pytest.mark.parametrize("argv", [
    ["topology", "show", str(FIXTURES / "dgx-h100.yaml")],
    ["topology", "list"],
])
def test_yaml_output_reads_back_as_the_json_output(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main([*argv, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*argv, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json
    assert as_json


def test_smi_yaml_reads_back_as_its_json(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    state = tmp_path / "n.state"
    base = ["--topology", "dgx-h100", "--state", str(state)]
    assert main(["nvml", "render", *base]) == 0
    capsys.readouterr()
    assert main(["smi", "--state", str(state), "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["smi", "--state", str(state), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_the_commands(shell: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    assert text == script(shell)
    for word in ("cluster", "topology", "smi", "fault", "upgrade-plugin", "--cluster",
                 "completion"):
        assert word in text, word
    assert "--node-name" not in text and "--driver-name" not in text  # hidden stays hidden


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_script_is_valid_bash(tmp_path: Path) -> None:
    path = tmp_path / "fakegpu.bash"
    path.write_text(script("bash"))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_building_the_parser_imports_no_client_library() -> None:
    # The tests, the node entrypoints and users run `fakegpu ...` hundreds of times a session:
    # the Kubernetes client and gRPC (0.3 s of every start when a parser module imported a
    # runner for a constant) load only in the command that uses them.
    probe = ("import sys; from fakegpu.cli import build_parser; build_parser(); "
             "print(' '.join(m for m in ('kubernetes', 'grpc', 'google.protobuf') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [], f"building the CLI's parser imported {out}"
