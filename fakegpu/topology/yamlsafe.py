"""Read untrusted YAML into plain dicts/lists/scalars, refusing hostile shapes.

Guards (each becomes one Problem, never an exception): size, UTF-8, NUL bytes, nesting
depth, the number of YAML values in the document (counted while composing, so a huge
document is refused before its graph is built), the number of values after alias and merge
expansion (alias "billion laughs" bombs), explicit tags (``!!timestamp x``: PyYAML's
constructors crash on some), integers wider than 64 bits, lone surrogate escapes (no file or
C string holds them), duplicate keys (a typo'd duplicate would otherwise silently win),
non-string keys.

Events come from libyaml when PyYAML has it (about 20x faster than the pure-Python scanner
on a 1 MiB file); composing and building stay in Python so that every guard above applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from .errors import Problem
from .fields import join

MAX_BYTES = 1 << 20  # 1 MiB: an NVL72 rack is ~2 KiB of YAML
MAX_DEPTH = 32
# YAML values (scalars, lists, mappings, aliases) in one document, and after expanding
# aliases and merges: 1024 nodes written out one by one take ~16 values each.
MAX_VALUES = 50_000
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_INT_BITS = 64


class _Reject(Exception):
    """Internal: stops reading; carries the one Problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Loader(Composer, SafeConstructor, Resolver):
    """Composes and constructs with every guard; a subclass below adds the event source."""

    peek_event: Callable[[], Any]  # from the event source

    def __init__(self) -> None:
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self.depth = 0
        self.values = 0
        self.tags: dict[int, str] = {}  # id(node) -> the explicit tag written on it

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # The composer recurses per nesting level: cap it before Python's stack does; and
        # count values as they are read, before a huge document is held in memory.
        event: Any = self.peek_event()  # a node event: scalar, alias or collection start
        line = event.start_mark.line + 1
        self.values += 1
        if self.values > MAX_VALUES:
            raise _Reject(Problem("", f"line {line}: more than "
                                      f"{MAX_VALUES} YAML values, expected a topology"))
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Reject(Problem("", f"line {line}: nesting deeper "
                                          f"than {MAX_DEPTH} levels, expected a flat topology"))
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        tag = None if isinstance(event, AliasEvent) else event.tag
        if tag is not None and node is not None:
            self.tags[id(node)] = tag
        return node


class _PyLoader(_Loader, Reader, Scanner, Parser):
    """Events from PyYAML's pure-Python parser (a PyYAML built without libyaml)."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        _Loader.__init__(self)


try:
    from yaml._yaml import CParser

    class _CLoader(_Loader, CParser):
        """Events from libyaml."""

        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            _Loader.__init__(self)

    LOADER: type[_PyLoader | _CLoader] = _CLoader
except ImportError:
    LOADER = _PyLoader


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tag_text(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:") else tag


class _Builder:
    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.count = 0

    def build(self, node: Node, path: str, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_VALUES or depth > MAX_DEPTH:
            raise _Reject(Problem("", f"document expands to more than {MAX_VALUES} values "
                                      f"or deeper than {MAX_DEPTH} levels (alias bomb?)"))
        tag = self.loader.tags.get(id(node))
        if tag is not None:
            raise _Reject(Problem(path, f"has the YAML tag {_tag_text(tag)}, expected a plain "
                                        "value (tags are not supported)"))
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, SequenceNode):
            return [self.build(item, join(path, i), depth + 1)
                    for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        raise _Reject(Problem(path, f"unsupported YAML node {type(node).__name__}"))

    def _scalar(self, node: ScalarNode, path: str) -> Any:
        try:
            value = self.loader.construct_object(node)
        except (ValueError, OverflowError, ArithmeticError, LookupError) as err:
            # int() refuses over 4300 decimal digits; timestamps like 2020-13-45 fail too.
            if node.tag == _INT_TAG and len(node.value) > 2 * _MAX_INT_BITS:
                what = f"an integer of {len(node.value)} characters, expected at most " \
                       f"{_MAX_INT_BITS} bits"
            else:
                what = f"not a valid {_tag_text(node.tag)} ({err})"
            raise _Reject(Problem(path, f"is {what}")) from None
        if isinstance(value, str) and not _is_utf8(value):
            # A "\\ud800" escape makes a lone surrogate that no file or C string can hold.
            raise _Reject(Problem(path, "holds a lone surrogate escape, expected Unicode text"))
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            # Hex and octal have no digit limit; no field takes more than 64 bits.
            raise _Reject(Problem(path, f"is an integer of {value.bit_length()} bits, "
                                        f"expected at most {_MAX_INT_BITS}"))
        return value

    def _mapping(self, node: MappingNode, path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG and id(key_node) not in self.loader.tags:
                # `<<: *a` or `<<: [*a, *b]`: built (and counted) here, never copied
                # unbounded the way PyYAML's flatten_mapping would.
                sources = value_node.value if isinstance(value_node, SequenceNode) \
                    else [value_node]
                for source in sources:
                    value = self.build(source, path, depth + 1)
                    if not isinstance(value, dict):
                        raise _Reject(Problem(path, f"line {line}: merge (<<) of a "
                                                    "non-mapping, expected mappings"))
                    for key, item in value.items():
                        merged.setdefault(key, item)  # the first merged mapping wins
                continue
            key = self.build(key_node, path, depth + 1)
            if not isinstance(key, str):
                raise _Reject(Problem("", f"line {line}: key {key!r} is not a string, "
                                          "expected text keys"))
            if key in out:
                raise _Reject(Problem("", f"line {line}: duplicate key '{key}'"))
            out[key] = self.build(value_node, join(path, key), depth + 1)
        if not merged:
            return out
        return {**merged, **out}  # keys written in the mapping override merged ones


def read_yaml(data: bytes) -> Any:
    """Bytes -> plain Python data, or ``YamlRejected`` carrying the one Problem found."""
    documents = _read(data, single=True)
    return documents[0] if documents else None


def read_yaml_all(data: bytes) -> list[Any]:
    """Every document of a multi-document stream (``---``; Kubernetes manifests), each under
    the guards of ``read_yaml`` (the value counts add up over the stream)."""
    return _read(data, single=False)


def _read(data: bytes, single: bool) -> list[Any]:
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
    loader: _PyLoader | _CLoader | None = None
    try:
        loader = LOADER(text)  # the reader already rejects control characters here
        if single:
            node = loader.get_single_node()
            return [] if node is None else [_Builder(loader).build(node, "")]
        builder = _Builder(loader)  # one count for the stream: no bomb split over documents
        documents = []
        while loader.check_node():
            node = loader.get_node()
            documents.append(None if node is None else builder.build(node, ""))
        return documents
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
        raise YamlRejected(Problem("", f"not valid YAML ({type(err).__name__}: {err})")) \
            from None
    finally:
        if loader is not None:
            loader.dispose()


class YamlRejected(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem
