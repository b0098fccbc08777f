"""The ``nvbandwidth`` program (``csrc/nvbandwidth.c``): built like fakegpu's nvidia-smi,
static with the fake NVML's sources, so the busybox workload image runs it without a C
library or Python, and it reads the NVML view the claim's CDI spec mounts.

Its defaults are compiled in from fakegpu's data, never written twice: the per-link NVLink
speed of each generation from the hardware catalog, and the topology's default network speed.
"""

from __future__ import annotations

from pathlib import Path

from fakegpu import nvidiasmi
from fakegpu.topology.model import DEFAULT_NETWORK_GBPS_PER_GPU

from .model import link_table

NAME = "nvbandwidth"
HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "nvbandwidth.c"
IN_IMAGE = "/usr/bin/nvbandwidth"  # where the workload image holds it


def link_table_text() -> str:
    """``GEN=GBPS,...`` (the program's ``--link-gbps`` form) from the catalog."""
    return ",".join(f"{gen}={gbps:g}" for gen, gbps in sorted(link_table().items()))


def defines() -> tuple[str, ...]:
    return (f'FG_LINK_TABLE="{link_table_text()}"',
            f"FG_NETWORK_GBPS={DEFAULT_NETWORK_GBPS_PER_GPU:g}")


def build(out_dir: Path) -> Path:
    """Compile ``out_dir/nvbandwidth`` (replaced atomically) and return its path."""
    binary = nvidiasmi.build_static(SOURCE, NAME, out_dir, defines())
    (out_dir / f"{NAME}.defines").write_text("\n".join(defines()) + "\n")
    return binary


def _stale(binary: Path) -> bool:
    stamp = binary.with_name(f"{NAME}.defines")
    if not binary.is_file() or not stamp.is_file():
        return True
    if stamp.read_text() != "\n".join(defines()) + "\n":
        return True  # the catalog changed a speed
    built = binary.stat().st_mtime
    from fakegpu.nvml import build as nvml_build

    csrc = nvml_build.CSRC
    sources = [SOURCE, *csrc.glob("*.c"), *csrc.glob("*.h")]
    return any(src.stat().st_mtime > built for src in sources)


def path() -> Path:
    """The executable, built if missing or older than its sources."""
    return nvidiasmi.cached_program(HERE, NAME, _stale, build)
