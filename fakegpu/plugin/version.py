"""The plugin's version: a stamp baked into its image, or given by whoever starts it.

Upgrade tests need two (or three) versions of the plugin built from one tree. The version is
therefore not the package's alone: in order of precedence it is

1. ``$FAKEGPU_PLUGIN_VERSION`` (the embedded provider's upgrade sets it per instance);
2. the stamp file ``/opt/fakegpu/VERSION`` (written at image build from the build argument
   ``PLUGIN_VERSION``; ``$FAKEGPU_PLUGIN_STAMP`` names another file);
3. the package version (``fakegpu.__version__``).

A version ending in ``-broken`` (or ``$FAKEGPU_PLUGIN_BROKEN=1``) stands for a bad release:
the plugin runs its startup self-check, which then never passes, so the instance never opens
its sockets, never registers and never becomes Ready (it publishes nothing either). That is the
code path a real plugin takes when it cannot start serving, and it is what makes a rollout
stall while the previous version keeps serving the node.

The version is visible to users in each prepared claim's device status (``data.pluginVersion``),
in the plugin's log, and by ``fakegpu plugin run --version``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fakegpu import __version__
from fakegpu.errors import InvalidInput

VERSION_ENV = "FAKEGPU_PLUGIN_VERSION"
BROKEN_ENV = "FAKEGPU_PLUGIN_BROKEN"
STAMP_ENV = "FAKEGPU_PLUGIN_STAMP"
STAMP_FILE = Path("/opt/fakegpu/VERSION")
# Test hook for upgrade tests (a prepare in flight when the old instance is killed): every
# NodePrepareResources of this instance waits this many seconds before touching anything.
PREPARE_DELAY_ENV = "FAKEGPU_PLUGIN_PREPARE_DELAY"
BROKEN_SUFFIX = "-broken"
# A version goes into labels, image tags and file names: keep it to what all of them accept.
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class Stamp:
    version: str
    source: str  # where it came from, for the log
    broken: bool = False


def check(version: str, where: str) -> str:
    """``version`` if it is a usable version string, else bad input naming ``where``."""
    if not _VALID.fullmatch(version):  # fullmatch: match's `$` lets "2.0\n" through
        raise InvalidInput(f"{where}: plugin version {version!r} is not 1-63 characters of "
                           "letters, digits, '.', '_' or '-' starting with a letter or digit")
    return version


def current(environ: Mapping[str, str] | None = None) -> Stamp:
    """This plugin's version stamp (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if env.get(VERSION_ENV):
        version, source = check(env[VERSION_ENV].strip(), f"${VERSION_ENV}"), f"${VERSION_ENV}"
    else:
        stamp = Path(env.get(STAMP_ENV) or STAMP_FILE)
        try:
            text = stamp.read_text().strip()
        except OSError:
            text = ""
        if text:
            version, source = check(text, str(stamp)), str(stamp)
        else:
            version, source = __version__, "package"
    broken = version.endswith(BROKEN_SUFFIX) or env.get(BROKEN_ENV, "") in ("1", "true")
    return Stamp(version, source, broken)


def prepare_delay(environ: Mapping[str, str] | None = None) -> float:
    """``$FAKEGPU_PLUGIN_PREPARE_DELAY`` in seconds (0 when unset); bad input names it."""
    env = os.environ if environ is None else environ
    text = env.get(PREPARE_DELAY_ENV, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 600:
        raise InvalidInput(f"${PREPARE_DELAY_ENV}: {text!r} is not a number of seconds "
                           "from 0 to 600")
    return value
