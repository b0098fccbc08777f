"""The bandwidth job's results: the ranks' outputs merged into one document, and that
document read back (for ``fakegpu bandwidth report``) with one-line errors.

Document (``format: fakegpu-bandwidth/1``)::

    {"format": "fakegpu-bandwidth/1", "simulation": true, "note": "...", "unit": "GB/s",
     "network_gbps_per_gpu": 400.0,
     "gpus": [{"node", "index", "uuid", "name", "clique", "compute_domain", "imex_channel",
               "imex_daemon", "nvlink_version", "links_up", "fabric_degraded"}, ...],
     "bandwidth": [[null, 900.0, ...], ...],    # rows: from GPU i, columns: to GPU j
     "paths": [["self", "nvlink-local", ...], ...]}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import FakegpuError, InvalidInput, printable

from .model import Path as LinkPath

FORMAT = "fakegpu-bandwidth/1"
RANK_FORMAT = "fakegpu-nvbandwidth/1"
MAX_BYTES = 16 * 1024 * 1024
MAX_GPUS = 2048
MAX_SPEED = 1e9  # GB/s; NVLink 5 is 1,800
_PATHS = {p.value for p in LinkPath}


class RanksDisagree(FakegpuError):
    """The ranks of one job reported different GPU lists or missed rows."""


def merge(outputs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One document from every rank's output (each has all GPUs and its own rows)."""
    if not outputs:
        raise RanksDisagree("no rank reported anything")
    first = outputs[0]
    gpus = first["gpus"]
    size = len(gpus)
    bandwidth: list[Any] = [None] * size
    paths: list[Any] = [None] * size
    for out in outputs:
        if out.get("format") != RANK_FORMAT or out.get("simulation") is not True:
            raise RanksDisagree(f"rank {out.get('rank')} did not report {RANK_FORMAT}")
        if out["gpus"] != gpus:
            raise RanksDisagree(f"rank {out['rank']} saw other GPUs than rank {first['rank']}")
        for row in out["rows"]:
            bandwidth[row["from"]] = row["bandwidth"]
            paths[row["from"]] = row["paths"]
    missing = [i for i, row in enumerate(bandwidth) if row is None]
    if missing:
        raise RanksDisagree(f"no rank reported the rows of GPUs {missing}")
    return {
        "format": FORMAT, "simulation": True, "note": first["note"], "unit": first["unit"],
        "network_gbps_per_gpu": first["network_gbps_per_gpu"],
        "gpus": [{k: v for k, v in g.items() if k != "rank"} for g in gpus],
        "bandwidth": bandwidth, "paths": paths,
    }


@dataclass(frozen=True)
class Results:
    nodes: tuple[str, ...]  # per GPU, in matrix order
    labels: tuple[str, ...]  # "node/GPU i"
    bandwidth: tuple[tuple[float | None, ...], ...]
    paths: tuple[tuple[str, ...], ...]
    unit: str


def load(path: Path) -> Results:
    """Read and check a results document; InvalidInput (one line) when it is not one."""
    where = printable(str(path))
    try:
        if not path.is_file():
            raise InvalidInput(f"{where}: no such file")
        if path.stat().st_size > MAX_BYTES:
            raise InvalidInput(f"{where}: larger than {MAX_BYTES // 2**20} MiB, expected a "
                               "bandwidth results file")
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput(f"{where}: cannot read: {printable(str(err))}") from None
    except json.JSONDecodeError as err:
        raise InvalidInput(f"{where}: not JSON ({err.msg} at line {err.lineno}), expected "
                           f"a {FORMAT} document") from None
    except ValueError as err:  # an integer past Python's 4,300 digits
        raise InvalidInput(f"{where}: not JSON we can read ({printable(str(err))[:120]}), "
                           f"expected a {FORMAT} document") from None
    except RecursionError:
        raise InvalidInput(f"{where}: JSON nested deeper than Python's parser goes, expected "
                           f"a {FORMAT} document") from None
    return parse(data, where)


def parse(data: Any, where: str) -> Results:
    def bad(field: str, expected: str) -> InvalidInput:
        return InvalidInput(f"{where}: {field}: expected {expected}")

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad("format", f"'{FORMAT}' (the output of `fakegpu bandwidth run`)")
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or not 0 < len(gpus) <= MAX_GPUS:
        raise bad("gpus", f"a list of 1..{MAX_GPUS} GPUs")
    nodes, labels = [], []
    for i, g in enumerate(gpus):
        if (not isinstance(g, dict) or not isinstance(g.get("node"), str)
                or not isinstance(g.get("index"), int) or isinstance(g.get("index"), bool)):
            raise bad(f"gpus[{i}]", "a mapping with node (text) and index (an integer)")
        nodes.append(printable(g["node"]))
        labels.append(f"{printable(g['node'])}/{g['index']}")
    n = len(gpus)
    matrix = _square(data.get("bandwidth"), n, "bandwidth", bad, _speed,
                     f"null or a number from 0 to {MAX_SPEED:g}")
    paths = _square(data.get("paths"), n, "paths", bad, lambda v: v in _PATHS,
                    f"one of {', '.join(sorted(_PATHS))}")
    unit = data.get("unit")
    if not isinstance(unit, str):
        raise bad("unit", "text such as 'GB/s'")
    return Results(tuple(nodes), tuple(labels),
                   tuple(tuple(None if v is None else float(v) for v in row) for row in matrix),
                   tuple(tuple(row) for row in paths), printable(unit))


def _speed(value: Any) -> bool:
    # Bounded: 10**400 has no float, Infinity and NaN (JSON extensions) no colour.
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and 0 <= value <= MAX_SPEED)


def _square(raw: Any, n: int, field: str, bad: Any, ok: Any, what: str) -> list[list[Any]]:
    if not isinstance(raw, list) or len(raw) != n:
        raise bad(field, f"a list of {n} rows (one per GPU)")
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != n:
            raise bad(f"{field}[{i}]", f"a list of {n} values")
        for j, value in enumerate(row):
            if not ok(value):
                raise bad(f"{field}[{i}][{j}]", f"{what}, got {printable(repr(value))[:40]}")
    return raw
