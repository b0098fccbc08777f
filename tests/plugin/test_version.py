"""The plugin's version stamp: environment over stamp file over package; bad values refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu import __version__
from fakegpu.errors import InvalidInput
from fakegpu.plugin import version


def test_environment_wins_over_the_stamp_file(tmp_path: Path) -> None:
    stamp = tmp_path / "VERSION"
    stamp.write_text("1.0.0\n")
    env = {version.STAMP_ENV: str(stamp)}
    assert version.current(env) == version.Stamp("1.0.0", str(stamp))
    env[version.VERSION_ENV] = "2.0.0"
    assert version.current(env).version == "2.0.0"


def test_without_stamp_the_package_version(tmp_path: Path) -> None:
    got = version.current({version.STAMP_ENV: str(tmp_path / "absent")})
    assert (got.version, got.source, got.broken) == (__version__, "package", False)


@pytest.mark.parametrize("env", [{version.VERSION_ENV: "2.0.0-broken"},
                                 {version.VERSION_ENV: "2.0.0", version.BROKEN_ENV: "1"}])
def test_broken_releases(env: dict[str, str]) -> None:
    assert version.current(env).broken


@pytest.mark.parametrize("bad", ["a b", "-x", "x" * 64, "v1/../x"])
def test_bad_versions_are_refused_naming_the_source(bad: str) -> None:
    with pytest.raises(InvalidInput, match=r"FAKEGPU_PLUGIN_VERSION"):
        version.current({version.VERSION_ENV: bad})


def test_plugin_run_version_prints_the_stamp() -> None:
    env = {"PATH": "/usr/bin:/bin", version.VERSION_ENV: "3.1.4"}
    out = subprocess.run([sys.executable, "-m", "fakegpu", "plugin", "run", "--version"],
                         capture_output=True, text=True, env=env, check=True, timeout=60)
    assert out.stdout.strip() == "3.1.4"
