"""Typed reads from untrusted mappings that record Problems with precise field paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from .errors import Problem

T = TypeVar("T")
_MISSING = object()


def type_name(value: object) -> str:
    if value is None:
        return "nothing"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "text",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


class Report:
    """Collects problems; readers return None on a bad value so checking can go on."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def mapping(self, value: Any, path: str, allowed: Iterable[str]) -> dict[str, Any] | None:
        """``value`` must be a mapping whose keys are all in ``allowed`` (typos are errors)."""
        if not isinstance(value, dict):
            self.add(path, f"is {type_name(value)}, expected a mapping")
            return None
        known = list(allowed)
        for key in value:
            if key not in known:
                self.add(join(path, key), f"unknown field, expected one of {', '.join(known)}")
        return value

    def get(self, data: dict[str, Any], key: str, path: str, kind: type[T],
            default: Any = _MISSING) -> T | None:
        """``data[key]`` checked against ``kind``; a missing required key is a problem."""
        where = join(path, key)
        if key not in data or data[key] is None:
            if default is _MISSING:
                self.add(where, f"is required, expected {type_name(_example(kind))}")
                return None
            return default  # type: ignore[no-any-return]
        value = data[key]
        # bool is an int subclass in Python; YAML's `yes` must not pass as a count.
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # type: ignore[return-value]
        if not ok:
            self.add(where, f"is {type_name(value)} ({_short(value)}), expected "
                            f"{type_name(_example(kind))}")
            return None
        return value  # type: ignore[no-any-return]

    def int_in(self, data: dict[str, Any], key: str, path: str, low: int, high: int,
               default: Any = _MISSING) -> int | None:
        value = self.get(data, key, path, int, default)
        given = data.get(key) is not None  # defaults are trusted, only given values checked
        if given and isinstance(value, int) and not low <= value <= high:
            self.add(join(path, key), f"is {value}, expected {low}..{high}")
            return None
        return value


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _example(kind: type) -> object:
    return {bool: True, int: 0, float: 0.0, str: "", list: [], dict: {}}.get(kind, kind)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
