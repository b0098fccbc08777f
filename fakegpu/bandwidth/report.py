"""``fakegpu bandwidth report``: the GPU-by-GPU matrix of a bandwidth job as a heatmap (PNG,
nodes marked) and as a markdown table."""

from __future__ import annotations

import io
from collections import Counter
from itertools import groupby
from pathlib import Path

from fakegpu.errors import InvalidInput, MissingPrerequisite, printable
from fakegpu.fsutil import atomic_write

from .results import Results

# Above this many GPUs the cells are too small for numbers; the colours still tell.
_ANNOTATE_UP_TO = 24


def node_spans(results: Results) -> list[tuple[str, int, int]]:
    """(node, first GPU position, count) for each run of one node's GPUs in matrix order."""
    spans, start = [], 0
    for node, members in groupby(results.nodes):
        count = len(list(members))
        spans.append((node, start, count))
        start += count
    return spans


def heatmap_png(results: Results, title: str) -> bytes:
    try:
        import matplotlib
    except ImportError:
        raise MissingPrerequisite("the heatmap needs matplotlib: pip install 'fakegpu[report]'"
                                  ) from None

    matplotlib.use("Agg")  # no display; and set before pyplot is imported
    # Node names, the unit and the title are data: "$...$" in them is text, not mathtext.
    with matplotlib.rc_context({"text.parse_math": False}):
        return _draw(results, title)


def _draw(results: Results, title: str) -> bytes:
    import matplotlib
    import matplotlib.pyplot as plt
    import numpy as np

    n = len(results.labels)
    values = np.array([[np.nan if v is None else v for v in row] for row in results.bandwidth])
    side = min(4 + 0.45 * n, 22)
    fig, ax = plt.subplots(figsize=(side + 1.5, side), dpi=72)
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("#dddddd")  # the diagonal and unmodelled (PCIe) pairs
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 1.0
    image = ax.imshow(values, cmap=cmap, vmin=0, vmax=top)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(f"{results.unit}, one direction (simulated)")
    spans = node_spans(results)
    for _, start, _count in spans[1:]:
        ax.axhline(start - 0.5, color="white", linewidth=2)
        ax.axvline(start - 0.5, color="white", linewidth=2)
    # GPUs by index, nodes named once per block on the outer axes
    ax.set_xticks(range(n), [label.rsplit("/", 1)[1] for label in results.labels], fontsize=7)
    ax.set_yticks(range(n), [label.rsplit("/", 1)[1] for label in results.labels], fontsize=7)
    for node, start, count in spans:
        middle = start + (count - 1) / 2
        ax.text(middle, n - 0.5 + 0.06 * n, node, ha="center", va="top", fontsize=8)
        ax.text(-0.5 - 0.06 * n, middle, node, ha="right", va="center", fontsize=8,
                rotation=90)
    if n <= _ANNOTATE_UP_TO:
        for i in range(n):
            for j in range(n):
                v = values[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{v:g}", ha="center", va="center", fontsize=6,
                            color="black" if v > top * 0.6 else "white")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("to GPU", labelpad=40)
    ax.set_ylabel("from GPU", labelpad=40)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def markdown(results: Results) -> str:
    """A summary (how many pairs went which way) and the full matrix."""
    counts = Counter(p for row in results.paths for p in row if p != "self")
    speeds: dict[str, set[float]] = {}
    for brow, prow in zip(results.bandwidth, results.paths, strict=True):
        for v, p in zip(brow, prow, strict=True):
            if v is not None:
                speeds.setdefault(p, set()).add(v)
    lines = ["| path | GPU pairs | " + results.unit + " |", "|---|---:|---|"]
    for path, count in sorted(counts.items()):
        figures = ", ".join(f"{v:g}" for v in sorted(speeds.get(path, ()))) or "-"
        lines.append(f"| {path} | {count} | {figures} |")
    lines += ["", f"{results.unit}, one direction, simulated (from row GPU to column GPU):", ""]
    lines.append("| from \\ to | " + " | ".join(results.labels) + " |")
    lines.append("|---|" + "---:|" * len(results.labels))
    for label, row in zip(results.labels, results.bandwidth, strict=True):
        cells = ["-" if v is None else f"{v:g}" for v in row]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(results: Results, png: Path, table: Path, title: str) -> None:
    """Both files, each replaced whole; a path the system refuses is one-line InvalidInput."""
    for path, data in ((png, heatmap_png(results, title)), (table, markdown(results).encode())):
        try:
            atomic_write(path, data)
        except OSError as err:
            raise InvalidInput(f"{printable(str(path))}: cannot write: "
                               f"{err.strerror or err}") from None
