"""hostpkgs decides "installed" from dpkg's status word exactly, and runs one apt-get at a time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.hostpkgs import is_installed_status


@pytest.mark.parametrize("status, expected", [
    ("install ok installed", True),
    ("hold ok installed", True),
    # A package dpkg knows but that was removed: the fresh-machine answer for debootstrap.
    ("unknown ok not-installed", False),
    ("deinstall ok config-files", False),
    ("install ok half-installed", False),
    ("install reinstreq half-installed", False),
    ("", False),
])
def test_status_word_decides(status: str, expected: bool) -> None:
    assert is_installed_status(status) is expected


def test_real_dpkg_answers() -> None:
    """Against this machine's dpkg: dpkg itself is installed, a name nobody packages is not."""
    from fakegpu.hostpkgs import installed

    assert installed("dpkg") is True
    assert installed("fakegpu-no-such-package") is False


# Stand-ins for dpkg-query and apt-get that keep their state in $STATE: apt-get fails as the
# real one does while another holds dpkg's lock, and takes a moment to install.
_DPKG_QUERY = """#!/bin/sh
pkg=$(eval echo \\${$#})
[ -e "$STATE/$pkg" ] && { printf 'install ok installed'; exit 0; }
exit 1
"""
_APT_GET = """#!/bin/sh
if ! mkdir "$STATE/dpkg.lock" 2>/dev/null; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100
fi
echo "$*" >> "$STATE/calls"
sleep 1
if [ "$1" = install ]; then
  for pkg in "$@"; do case "$pkg" in -*|install) ;; *) touch "$STATE/$pkg";; esac; done
fi
rmdir "$STATE/dpkg.lock"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="hostpkgs installs only as root")
def test_two_processes_wanting_a_package_install_it_once_one_after_the_other(
        tmp_path: Path) -> None:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("dpkg-query", _DPKG_QUERY), ("apt-get", _APT_GET)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state),
           "FAKEGPU_CACHE_DIR": str(tmp_path / "cache")}
    code = "from fakegpu import hostpkgs; hostpkgs.ensure(['fakepkg'], why='a test')"
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    errors = [run.communicate(timeout=60)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    assert (state / "fakepkg").exists()
    # The second waited for the first and found the package: one update, one install.
    calls = (state / "calls").read_text().splitlines()
    assert calls == ["update -q", "install -y -q --no-install-recommends fakepkg"], calls
