"""hostpkgs decides "installed" from dpkg's status word exactly."""

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
