"""The topologies shipped with fakegpu (``fixtures/`` of this package, package data in a wheel),
and the one rule that turns what a user typed after ``--topology`` into a file.

``resolve_topology("dgx-h100")`` and ``resolve_topology("my/own.yaml")`` both give a path: a file
that exists wins (relative to ``base``, else the working directory), then a packaged name (with
or without ``.yaml``). Every command, the pytest plugin and the test kit call it, so a name works
wherever a topology path does, from a checkout or an installed wheel alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import InvalidInput, printable

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SUFFIX = ".yaml"

# The one default cluster topology (the talk's 4x4 mini GB200 rack), for every command and the
# pytest plugin alike.
DEFAULT = "gb200-mini"


@dataclass(frozen=True)
class Packaged:
    name: str
    path: Path
    description: str


def names() -> list[str]:
    """The packaged topologies' names, sorted."""
    return sorted(p.name.removesuffix(SUFFIX) for p in FIXTURES.glob(f"*{SUFFIX}"))


def path(name: str) -> Path:
    """The packaged topology ``name`` (``dgx-h100`` or ``dgx-h100.yaml``)."""
    stem = name.removesuffix(SUFFIX)
    candidate = FIXTURES / f"{stem}{SUFFIX}"
    if "/" in stem or not candidate.is_file():
        raise InvalidInput(f"topology {printable(name)!r}: no packaged topology of that name "
                           f"(packaged: {', '.join(names())})")
    return candidate


def default_topology() -> Path:
    return FIXTURES / f"{DEFAULT}{SUFFIX}"


def describe(topology: Path) -> str:
    """The first line of the file's leading comment: each packaged file opens with a summary."""
    with topology.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                return line.lstrip("#").strip()
            if line.strip():
                break
    return ""


def packaged() -> list[Packaged]:
    return [Packaged(n, path(n), describe(path(n))) for n in names()]


def resolve_topology(name_or_path: str | Path, base: Path | None = None) -> Path:
    """A topology file from a path (relative to ``base``, default the working directory) or a
    packaged name. Raises InvalidInput (one line) when it is neither. Whatever exists at the
    path is returned: the loader refuses what is not a regular YAML file, in its own words."""
    given = Path(name_or_path)
    candidate = given if given.is_absolute() or base is None else base / given
    if candidate.exists():
        return candidate  # the loader says what is wrong with a FIFO, a directory, ...
    text = str(name_or_path)
    if "/" not in text and (FIXTURES / f"{text.removesuffix(SUFFIX)}{SUFFIX}").is_file():
        return path(text)
    raise InvalidInput(f"topology {printable(text)!r}: no such file, and no packaged topology of "
                       f"that name (fakegpu topology list: {', '.join(names())})")
