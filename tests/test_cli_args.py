"""The CLI's refusals of bad flags: one line naming the flag, exit 2, no traceback."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fakegpu.cli import argtypes, main
from fakegpu.errors import EXIT_INVALID


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``fakegpu argv``; it must exit 2 with one line on stderr, which is returned."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_INVALID
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "-5", "-0.1", "soon", ""])
def test_seconds_refuses_what_is_no_finite_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.seconds(text)


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("2.5", 2.5), ("120", 120.0)])
def test_seconds_takes_a_finite_duration(text: str, value: float) -> None:
    assert argtypes.seconds(text) == value


@pytest.mark.parametrize("text", ["0", "nan", "inf", "-1"])
def test_interval_and_positive_refuse_zero_and_what_is_not_finite(text: str) -> None:
    for parse in (argtypes.interval, argtypes.positive):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    assert argtypes.interval("0.5") == argtypes.positive("0.5") == 0.5


# Every float flag of the CLI: each refuses nan, inf and negatives on one line, exit 2.
FLAGS = [
    (["cluster", "up"], "--timeout"),
    (["cluster", "upgrade-plugin", "c", "--to", "2.0"], "--timeout"),
    (["plugin", "run"], "--rediscover-interval"),
    (["plugin", "run"], "--grace-period"),
    (["computedomain", "controller", "--daemon-image", "i"], "--resync"),
    (["bandwidth", "run", "--cluster", "c", "--out", "r.json"], "--network-gbps"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
@pytest.mark.parametrize(("argv", "flag"), FLAGS)
def test_every_float_flag_refuses_nan_inf_and_negatives(
        capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, value: str) -> None:
    err = _refused(capsys, [*argv, f"{flag}={value}"])
    assert f"argument {flag}: '{value}'" in err


def test_upgrade_plugin_takes_to_and_the_old_version_spelling_hidden(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert "one of the arguments --to is required" in _refused(
        capsys, ["cluster", "upgrade-plugin", "c"])
    with pytest.raises(SystemExit):
        main(["cluster", "upgrade-plugin", "--help"])
    usage = capsys.readouterr().out
    assert "--to VERSION" in usage and "--version" not in usage


@pytest.mark.parametrize("flag", ["--to", "--version"])
@pytest.mark.parametrize("version", ["2.0\n", "2.0\n-x", "", "-2.0", "2.0/../x"])
def test_upgrade_plugin_refuses_a_version_that_is_no_name_before_anything(
        capsys: pytest.CaptureFixture[str], flag: str, version: str) -> None:
    # The cluster does not exist: a version refused first means it was checked first.
    assert main(["cluster", "upgrade-plugin", "nosuch-harden", flag, version]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "plugin version" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("command", [["status"], ["status", "-o", "json"],
                                     ["logs", "--out", "OUT"]])
def test_no_such_cluster_is_exit_2_from_every_command(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    argv = ["cluster", *(str(tmp_path) if a == "OUT" else a for a in command),
            "--cluster", "nosuch-harden"]
    assert main(argv) == EXIT_INVALID
    assert "no cluster 'nosuch-harden'" in capsys.readouterr().err


@pytest.mark.parametrize(("root", "why"), [
    ("relative/kubelet", "is a relative path, expected an absolute one"),
    ("/proc/fakegpu-kubelet", "cannot create directory /proc/fakegpu-kubelet"),
    ("/dev/null/kubelet", "cannot create directory /dev/null/kubelet/plugins_registry: Not a "
                          "directory"),
])
def test_plugin_run_refuses_a_kubelet_root_it_cannot_use(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, root: str, why: str) -> None:
    assert main(["plugin", "run", "--node", "n1", "--kubelet-root", root,
                 "--cdi-root", str(tmp_path / "cdi")]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("fakegpu: --kubelet-root: ") and why in err
    assert len(err.splitlines()) == 1
