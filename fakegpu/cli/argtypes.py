"""argparse types shared by every command: numbers a flag may take, checked in one place.

``float("nan")``, ``float("inf")`` and negatives parse as floats, and a wait with a NaN limit
never ends (every comparison with NaN is false); a flag of seconds therefore takes only a
finite number. A refusal is argparse's own: the usage line, one line naming the flag, exit 2.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from fakegpu.cluster.names import validate_name
from fakegpu.errors import InvalidInput
from fakegpu.topology.packaged import DEFAULT, resolve_topology


def _finite(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} (a finite number)")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, 0 or more (a timeout, a grace period)."""
    value = _finite(text, "a number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def interval(text: str) -> float:
    """A period in seconds, more than 0 (0 would make its loop spin)."""
    value = _finite(text, "a number of seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (more than 0)")
    return value


def positive(text: str) -> float:
    """A finite number more than 0 (a rate such as Gbit/s)."""
    value = _finite(text, "a number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number more than 0")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return value


TOPOLOGY_HELP = (f"a packaged topology's name (fakegpu topology list) or a topology YAML "
                 f"(default: {DEFAULT})")


def topology(text: str) -> Path:
    """A topology file or the name of a packaged one (``fakegpu topology list``)."""
    try:
        return resolve_topology(text)
    except InvalidInput as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cluster_name(text: str) -> str:
    """The one cluster-name rule (a bad name exits 2 with the rule)."""
    try:
        return validate_name(text)
    except InvalidInput as err:
        raise argparse.ArgumentTypeError(str(err)) from None
