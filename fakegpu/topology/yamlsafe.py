"""Read untrusted YAML into plain dicts/lists/scalars, refusing hostile shapes.

Guards (each becomes one Problem, never an exception): size, UTF-8, NUL bytes, nesting
depth, total node count after alias expansion (alias "billion laughs" bombs), duplicate
keys (a typo'd duplicate would otherwise silently win), non-string keys.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import Problem

MAX_BYTES = 1 << 20  # 1 MiB: an NVL72 rack is ~2 KiB of YAML
MAX_DEPTH = 32
MAX_NODES = 200_000  # counted with aliases expanded


class _Reject(Exception):
    """Internal: stops reading; carries the one Problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Loader(yaml.SafeLoader):
    # The composer recurses per nesting level: cap it before Python's stack does.
    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Reject(Problem("", f"line {mark.line + 1}: nesting deeper than "
                                          f"{MAX_DEPTH} levels, expected a flat topology"))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Builder:
    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.count = 0

    def build(self, node: Node, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES or depth > MAX_DEPTH:
            raise _Reject(Problem("", f"document expands to more than {MAX_NODES} values "
                                      f"or deeper than {MAX_DEPTH} levels (alias bomb?)"))
        if isinstance(node, ScalarNode):
            return self.loader.construct_object(node)
        if isinstance(node, SequenceNode):
            return [self.build(item, depth + 1) for item in node.value]
        if isinstance(node, MappingNode):
            self.loader.flatten_mapping(node)  # resolves `<<:` merge keys
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.build(key_node, depth + 1)
                line = key_node.start_mark.line + 1
                if not isinstance(key, str):
                    raise _Reject(Problem("", f"line {line}: key {key!r} is not a string, "
                                              "expected text keys"))
                if key in out:
                    raise _Reject(Problem("", f"line {line}: duplicate key '{key}'"))
                out[key] = self.build(value_node, depth + 1)
            return out
        raise _Reject(Problem("", f"unsupported YAML node {type(node).__name__}"))


def read_yaml(data: bytes) -> Any:
    """Bytes -> plain Python data, or ``YamlRejected`` carrying the one Problem found."""
    if len(data) > MAX_BYTES:
        raise YamlRejected(Problem("", f"file is {len(data)} bytes, expected at most "
                                       f"{MAX_BYTES} (is this a topology file?)"))
    if b"\0" in data:
        raise YamlRejected(Problem("", "file contains NUL bytes: binary, expected YAML text"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise YamlRejected(Problem("", f"byte {err.start} is not UTF-8, expected UTF-8 "
                                       "YAML text")) from None
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader already rejects control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        return _Builder(loader).build(node)
    except _Reject as err:
        raise YamlRejected(err.problem) from None
    except yaml.reader.ReaderError as err:
        raise YamlRejected(Problem("", f"character {err.position}: control character "
                                       f"#x{err.character:04x}, expected YAML text")) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        what = err.problem or err.context or "syntax error"
        raise YamlRejected(Problem("", f"{where}not valid YAML ({what})")) from None
    except (yaml.YAMLError, ValueError, OverflowError, TypeError, RecursionError) as err:
        # Constructors raise plain ValueError for e.g. a timestamp like 2020-13-45.
        raise YamlRejected(Problem("", f"not valid YAML ({type(err).__name__}: {err})")) \
            from None
    finally:
        if loader is not None:
            loader.dispose()


class YamlRejected(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem
