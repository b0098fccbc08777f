"""Fuzz the NVML state file: mutate valid state files and run a C client on each.

Usage: python fuzz/state.py SECONDS CLIENT [ASAN_CLIENT]. Seeds are the renders of every
fixture node (first node of each). Each input is a seed with byte flips, random words, or
splices, applied to the dynamic part, the header, or anywhere (and then, half the time, the
static checksum re-signed so the mutation reaches past validation), a GPU or compute instance
made active with one field out of range, or a truncation. Each
input runs in the plain client, every fourth also in the ASan/UBSan build; some runs vandalise
the file while the client has it mapped (truncate, overwrite in place). The contract: NVML
codes only, never a signal, never a hang. Findings go to fuzz/out/state/crashes/.
"""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fakegpu.nvml import env, state  # noqa: E402
from fakegpu.topology.load import load_topology  # noqa: E402
from fakegpu.topology.packaged import FIXTURES  # noqa: E402

OUT = ROOT / "fuzz" / "out" / "state"
TIMEOUT_S = 20.0  # a hang: no client run takes more than a fraction of a second


def seeds() -> list[bytes]:
    out = []
    for fixture in sorted(FIXTURES.glob("*.yaml")):
        topo = load_topology(fixture)
        out.append(state.render_bytes(topo, topo.nodes[0]))
    return out


def resign(data: bytearray) -> None:
    """Recompute the static checksum, as a careful vandal would."""
    hsize = ctypes.sizeof(state.Header)
    if len(data) < hsize:
        return
    head = bytearray(data[: state.Header.generation.offset])
    head[state.Header.checksum.offset: state.Header.checksum.offset + 4] = bytes(4)
    crc = zlib.crc32(bytes(head))
    gsize, ssize = ctypes.sizeof(state.GpuRecord), ctypes.sizeof(state.GpuStatic)
    count = int.from_bytes(data[state.Header.gpu_count.offset:][:4], "little")
    for i in range(min(count, state.MAX_GPUS)):
        off = hsize + i * gsize
        if off + ssize > len(data):
            break
        crc = zlib.crc32(bytes(data[off: off + ssize]), crc)
    data[state.Header.checksum.offset: state.Header.checksum.offset + 4] = \
        crc.to_bytes(4, "little")


def dynamic_ranges(data: bytes) -> list[tuple[int, int]]:
    hsize = ctypes.sizeof(state.Header)
    gsize = ctypes.sizeof(state.GpuRecord)
    ranges = [(state.Header.generation.offset, hsize)]
    for off in range(hsize, len(data) - gsize + 1, gsize):
        ranges.append((off + state.GpuRecord.d.offset, off + gsize))
    return ranges


INTERESTING = [0, 1, 2, 7, 8, 15, 16, 255, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0]


def mutate_record(rng: random.Random, data: bytearray) -> None:
    """Structure-aware: an active GPU or compute instance with one field out of range."""
    hsize, gsize = ctypes.sizeof(state.Header), ctypes.sizeof(state.GpuRecord)
    count = (len(data) - hsize) // gsize
    if count <= 0:
        return
    off = hsize + rng.randrange(count) * gsize + state.GpuRecord.d.offset
    dyn = state.GpuDynamic.from_buffer(data, off)
    dyn.mig_current = rng.choice([1, 1, 1, 2])
    gi = dyn.gis[rng.randrange(state.MAX_GIS)]
    gi.active = 1
    ci = gi.cis[rng.randrange(state.MAX_CIS)]
    ci.active = rng.choice([0, 1])
    target, field = rng.choice([(gi, "profile_index"), (gi, "start"), (gi, "size"),
                                (gi, "id"), (ci, "nvml_profile"), (ci, "start"), (ci, "size"),
                                (ci, "id")])
    setattr(target, field, rng.choice(INTERESTING))
    del dyn, gi, ci


def mutate(rng: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    where = rng.random()
    if where < 0.1:
        return bytes(data[: rng.randrange(0, len(data) + 1)])
    if where < 0.3:
        mutate_record(rng, data)
        return bytes(data)
    if where < 0.65:
        lo, hi = rng.choice(dynamic_ranges(seed))
    elif where < 0.75:
        lo, hi = 0, ctypes.sizeof(state.Header)
    else:
        lo, hi = 0, len(data)
    for _ in range(rng.choice([1, 1, 2, 4, 16])):
        pos = rng.randrange(lo, hi - 4) & ~3 if hi - lo > 8 else lo
        kind = rng.random()
        if kind < 0.4:
            data[pos] ^= 1 << rng.randrange(8)
        elif kind < 0.8:
            data[pos: pos + 4] = rng.choice(INTERESTING).to_bytes(4, "little")
        else:
            src = rng.randrange(0, len(seed) - 64)
            data[pos: pos + 64] = seed[src: src + 64]
    del data[len(seed):]  # splices never grow the file
    if rng.random() < 0.5:
        resign(data)
    return bytes(data)


def run(client: str, path: Path, args: list[str], environ: dict[str, str]) -> str | None:
    """None if the client ended normally, else what went wrong."""
    try:
        proc = subprocess.run([client, *args], env=environ, capture_output=True,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "hang"
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        return f"exit {proc.returncode}\n{tail}"
    return None


def main() -> int:
    seconds = float(sys.argv[1])
    clients = sys.argv[2:]
    rng = random.Random(int(os.environ.get("FUZZ_SEED", time.time_ns())))
    pool = seeds()
    (OUT / "crashes").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fakegpu-fuzz-state-"))
    environ = dict(os.environ, LD_LIBRARY_PATH=str(env.libdir()),
                   ASAN_OPTIONS="detect_leaks=0:allow_user_segv_handler=1:handle_sigbus=0:"
                                "abort_on_error=0:exitcode=86",
                   UBSAN_OPTIONS="halt_on_error=1:exitcode=87:print_stacktrace=1")
    path = work / "node.state"
    other = work / "other.state"
    environ["FAKEGPU_NVML_STATE"] = str(path)
    inputs = crashes = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seed = rng.choice(pool)
        data = mutate(rng, seed) if rng.random() < 0.9 else seed
        path.write_bytes(data)
        args: list[str] = []
        vandal = rng.random()
        if vandal < 0.15:
            args = [str(rng.choice([0, 8, 64, 4096, len(data) // 2, len(data) - 1]))]
        elif vandal < 0.25:
            other.write_bytes(rng.choice(pool))
            args = ["0", str(other)]
        runs = [clients[0]] + ([clients[1]] if len(clients) > 1 and inputs % 4 == 0 else [])
        for client in runs:
            path.write_bytes(data)
            finding = run(client, path, args, environ)
            if finding is not None:
                crashes += 1
                name = f"crash-{crashes:04d}"
                (OUT / "crashes" / f"{name}.state").write_bytes(data)
                (OUT / "crashes" / f"{name}.txt").write_text(
                    f"client {client} args {args}\n{finding}\n")
                print(f"fuzz state: finding {name}: {finding.splitlines()[0]}", file=sys.stderr)
                break
        inputs += 1
    print(f"fuzz state: {inputs} inputs, {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
