"""``fakegpu smi``'s summary table: the view ``fakegpu.nvml.smi.read`` gathers, rendered with
rich to fit the terminal.

On a terminal the tables take its width: the GPU columns that do not fit beside the most read
ones (index, name, memory, UUID, MIG mode, bus id, ...) go to a second table of the same
GPUs, then a third, so nothing is dropped and no cell wraps while one column fits; only a
terminal too narrow for that has rich fold the cells. Into a pipe or a file nothing is split
or wrapped: the tables are as wide as their content, one line per GPU, for grep."""

from __future__ import annotations

import io
from typing import IO, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Column header, key in the GPU's data (None: composed below), kept in the first table when
# narrow (higher first); the order here is the order on screen.
_GPU_COLUMNS: list[tuple[str, str | None, int]] = [
    ("GPU", "index", 99), ("Name", "name", 98), ("Bus-Id", "bus_id", 90),
    ("Memory-Usage", None, 97), ("GPU-Util", "utilization_percent", 80),
    ("Temp", "temperature_c", 70), ("Pwr:Usage/Cap", None, 60), ("MIG M.", "mig_mode", 85),
    ("UUID", "uuid", 95), ("Fabric (clique)", "fabric", 50),
    ("Volatile Uncorr. ECC", "ecc_uncorrected_volatile", 40), ("Perf", "performance_state", 30),
    ("Fan", "fan_percent", 25), ("Disp.A", "display_active", 20),
    ("Persistence-M", "persistence_mode", 15), ("Compute M.", "compute_mode", 10),
]
_WRAPPING = {"Name", "UUID", "Fabric (clique)"}
_UNITS = {"utilization_percent": "%", "temperature_c": "C", "fan_percent": "%"}


def render(view: dict[str, Any], out: IO[str], width: int | None = None) -> None:
    """Print ``view`` to ``out``; ``width`` overrides the terminal's (None: its own)."""
    probe = _console(out, width)
    terminal = width is not None or probe.is_terminal
    groups = _split(view, probe.width) if terminal else [_GPU_COLUMNS]
    gpu_tables = [_gpu_table(view, group, "GPUs" if k == 0 else "GPUs (continued)")
                  for k, group in enumerate(groups)]
    tables = [*gpu_tables, *_mig_table(view), *_process_table(view)]
    nvlink = _nvlink(view)
    if not terminal:  # as wide as the content: nothing wrapped for a script to reassemble
        probe = _console(out, max(_natural(t) for t in [*tables, *nvlink]))
    console = probe
    console.print(Text(f"Driver Version: {view['driver_version']}   CUDA Version: "
                       f"{view['cuda_version']}   GPUs: {view['count']}   "
                       f"state: {view['state']}"), soft_wrap=not terminal)
    for lost in view["lost"]:
        console.print(Text(f"GPU {lost['index']}: {lost['error']}", style="bold red"))
    for table in tables:
        console.print(table)
    for part in nvlink:
        console.print(part)


def _console(out: IO[str], width: int | None) -> Console:
    # NVML's strings are data: no markup, and no emoji (a bus id's ":AB:" is one to rich).
    return Console(file=out, width=width, markup=False, emoji=False, highlight=False)


def _natural(renderable: Any) -> int:
    from rich.measure import Measurement

    console = _console(io.StringIO(), 10_000)
    return Measurement.get(console, console.options, renderable).maximum


def _cell(gpu: dict[str, Any], header: str, key: str | None) -> str:
    if header == "Memory-Usage":
        used, total = gpu["memory_used_mib"], gpu["memory_total_mib"]
        return "N/A" if total is None else f"{used}MiB / {total}MiB"
    if header == "Pwr:Usage/Cap":
        power, cap = gpu["power_w"], gpu["power_cap_w"]
        return f"{'N/A' if power is None else f'{power}W'} / {'N/A' if cap is None else f'{cap}W'}"
    assert key is not None
    value = gpu[key]
    return "N/A" if value is None else f"{value}{_UNITS.get(key, '')}"


Column = tuple[str, str | None, int]


def _gpu_table(view: dict[str, Any], columns: list[Column], title: str = "GPUs") -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for header, _, _ in columns:
        wraps = header in _WRAPPING
        table.add_column(header, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis",
                         justify="right" if header in ("GPU", "GPU-Util", "Temp") else "left")
    for gpu in view["gpus"]:
        table.add_row(*(Text(_cell(gpu, header, key)) for header, key, _ in columns))
    return table


def _split(view: dict[str, Any], width: int) -> list[list[Column]]:
    """The GPU columns in tables that each fit ``width`` unwrapped, every table keyed by the
    GPU index: the most read columns first, each later one where it still fits."""
    key, *rest = _GPU_COLUMNS
    left = sorted(rest, key=lambda c: -c[2])
    groups = []
    while left:
        group = [key]
        for column in list(left):
            trial = [key, *(c for c in _GPU_COLUMNS if c in group[1:] or c is column)]
            if len(group) == 1 or _natural(_gpu_table(view, trial)) <= width:
                group = trial
                left.remove(column)
        groups.append(group)
    return groups


def _mig_table(view: dict[str, Any]) -> list[Table]:
    if not view["mig_devices"]:
        return []
    table = Table(title="MIG devices:", title_justify="left")
    for header in ("GPU", "GI", "CI", "MIG Dev", "Profile", "Memory-Usage"):
        table.add_column(header, no_wrap=True)
    table.add_column("UUID", overflow="fold")
    for m in view["mig_devices"]:
        cells = [str(m["gpu"]), str(m["gpu_instance"]), str(m["compute_instance"]),
                 str(m["device"]), m["profile"],
                 f"{m['memory_used_mib']}MiB / {m['memory_total_mib']}MiB", m["uuid"]]
        table.add_row(*map(Text, cells))
    return [table]


def _process_table(view: dict[str, Any]) -> list[Table]:
    table = Table(title="Processes:", title_justify="left")
    for header in ("GPU", "PID", "GPU Memory Usage"):
        table.add_column(header, no_wrap=True)
    for p in view["processes"]:
        table.add_row(str(p["gpu"]), str(p["pid"]), f"{p['used_memory_mib']}MiB")
    if not view["processes"]:
        table.add_row("", "No running processes found", "")
    return [table]


def _nvlink(view: dict[str, Any]) -> list[Any]:
    nvlink = view["nvlink"]
    if nvlink is None:
        return []
    parts: list[Any] = [Text("NVLink:")]
    parts.extend(Text(f"  GPU{g['gpu']}: {g['up']}/{g['links']} links up, "
                      f"{g['to_nvswitch']} to NVSwitch") for g in nvlink["gpus"])
    if nvlink["matrix"] is None:
        parts.append(Text(f"  (matrix omitted: more than {nvlink['matrix_limit']} GPUs)"))
        return parts
    names = [f"GPU{g['gpu']}" for g in nvlink["gpus"]]
    matrix = Table(box=None, show_edge=False, pad_edge=False)
    matrix.add_column("", no_wrap=True)
    for name in names:
        matrix.add_column(name, justify="right", no_wrap=True)
    for name, row in zip(names, nvlink["matrix"], strict=True):
        matrix.add_row(*map(Text, [name, *row]))
    parts.append(matrix)
    return parts
