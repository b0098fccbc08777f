"""The one rule for cluster names, for every provider, the CLI and the pytest plugin.

A name becomes part of paths (unix sockets live below the cluster directory and are limited
to 107 bytes), cgroups (``/fakegpu-<name>-<i>``), kind container names and iptables comments,
so it is short and made of lowercase letters, digits and '-'.
"""

from __future__ import annotations

import re

from fakegpu.errors import InvalidInput

MAX_LENGTH = 20
RULE = (f"1-{MAX_LENGTH} lowercase letters, digits or '-', starting and ending with a letter "
        "or digit")
_NAME_RE = re.compile(rf"^[a-z0-9]([a-z0-9-]{{0,{MAX_LENGTH - 2}}}[a-z0-9])?$")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid cluster name, else raise InvalidInput saying the rule."""
    if not _NAME_RE.match(name):
        raise InvalidInput(f"cluster name {name!r}: use {RULE} "
                           "(it becomes part of paths, cgroups and interface names)")
    return name


def down_command(name: str, provider: str = "embedded") -> str:
    """The command that removes cluster ``name`` of ``provider``: every hint spells it so."""
    flag = "" if provider == "embedded" else f" --provider {provider}"
    return f"fakegpu cluster down{flag} --cluster {name}"
