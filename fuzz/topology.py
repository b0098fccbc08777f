"""Fuzz target: the topology loader, its validation and the render to a state file.

Contract: every input either loads into a model whose every node renders to a state file and
which shows as JSON and as a table, or fails with a TopologyError whose lines are printable
single lines (at most MAX_LINES + 1 of them). Anything else is a crash: another exception, an
input using more than --timeout seconds of CPU, one blocked for --wall-timeout seconds, or
memory over --rss-mb. Crashing inputs are kept under OUT (crash-*, timeout-*, oom-*), the corpus
under OUT/corpus.

CPU time, not the clock: the largest legal input (1,024 nodes of 16 GPUs, which the fleet-1000
seed nears) takes about 5 s of CPU under atheris' instrumentation, and on a loaded 2-core host
twice that on the clock, so a 10 s wall-clock limit counted the target's own seed as a crash.

With atheris (coverage-guided libFuzzer) the driver runs libFuzzer in a child process, again
after each crash until the time is spent; without it, a plain mutation loop over the same
seeds. Run it through ``sh fuzz/topology.sh SECONDS``; the last line it prints is
``fuzz topology: N inputs, M crashes``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from fakegpu.nvml.state import Header, render_bytes  # noqa: E402
from fakegpu.topology.errors import MAX_LINES, MAX_MESSAGE, TopologyError  # noqa: E402
from fakegpu.topology.load import parse_bytes  # noqa: E402
from fakegpu.topology.packaged import FIXTURES  # noqa: E402
from fakegpu.topology.render import to_json, to_table  # noqa: E402

SEEDS = [*sorted(FIXTURES.glob("*.yaml")),
         *sorted((ROOT / "tests" / "topology" / "invalid").glob("*.yaml"))]
MAX_LEN = 65536  # structure, not size: the size limits have their own tests
MAX_CRASHES = 10  # stop restarting after this many
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # Kubernetes' rule, at most 63


def check(data: bytes) -> None:
    """One input against the contract; an AssertionError or any other exception is a crash."""
    try:
        topology = parse_bytes(data, "fuzz.yaml")
    except TopologyError as err:
        lines = err.lines()
        assert 1 <= len(lines) <= MAX_LINES + 1, lines
        for line in lines:
            assert line.startswith("fuzz.yaml: ") and line.isprintable(), line
            assert len(line) <= len("fuzz.yaml: ") + MAX_MESSAGE + 40, len(line)
        return
    names = [node.name for node in topology.nodes]
    assert len(names) == len(set(names)), names
    uuids = [gpu.uuid for node in topology.nodes for gpu in node.gpus]
    assert len(uuids) == len(set(uuids))
    for node in topology.nodes:
        assert len(node.name) <= 63 and _NODE_NAME.fullmatch(node.name), node.name
        buses = [g.pci for g in node.gpus] + [s.pci for s in node.nvswitches]
        assert len({a.bus_id for a in buses}) == len(buses), buses
        assert all(0 <= a.bus <= 0xFF for a in buses), buses
        state = render_bytes(topology, node)  # a valid topology renders: never InvalidInput
        assert Header.from_buffer_copy(state).node.decode() == node.name
    json.dumps(to_json(topology))
    to_table(topology)


# --- libFuzzer through atheris -----------------------------------------------------------


class CpuTimeout(Exception):
    """An input used more CPU time than its limit: unbounded work."""


@contextmanager
def _cpu_limit(seconds: float) -> Iterator[None]:
    """Raise CpuTimeout in the body after ``seconds`` of this process's CPU time (ITIMER_PROF:
    user + system), however long that takes on a loaded host's clock."""
    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise CpuTimeout(f"input used more than {seconds:g} s of CPU time")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _libfuzzer_child(cpu_seconds: float, args: list[str]) -> None:
    import atheris  # type: ignore[import-untyped]

    def one(data: bytes) -> None:
        with _cpu_limit(cpu_seconds):  # an exception: atheris keeps the input as crash-*
            check(bytes(data))

    atheris.instrument_all()  # coverage of the loader, PyYAML's Python half, the renderer
    atheris.Setup([sys.argv[0], *args], one)
    atheris.Fuzz()


def _libfuzzer(seconds: float, out: Path, timeout: int, wall_timeout: int,
               rss_mb: int) -> tuple[int, int]:
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in SEEDS:  # the fixtures start the corpus; libFuzzer keeps what it finds
        data = seed.read_bytes()
        if len(data) <= MAX_LEN:
            (corpus / f"seed-{seed.name}").write_bytes(data)
    deadline = time.monotonic() + seconds
    inputs = crashes = 0
    while crashes < MAX_CRASHES:
        left = int(deadline - time.monotonic())
        if left < 1:
            break
        before = _artifacts(out)
        log = out / "libfuzzer.log"
        with open(log, "w") as handle:
            subprocess.run([sys.executable, __file__, "--child", str(timeout),
                            f"-max_total_time={left}",
                            f"-timeout={wall_timeout}", f"-rss_limit_mb={rss_mb}",
                            f"-max_len={MAX_LEN}", "-print_final_stats=1",
                            f"-dict={_dictionary(out)}",
                            f"-artifact_prefix={out}/", str(corpus)],
                           stdout=handle, stderr=subprocess.STDOUT, check=False)
        text = log.read_text(errors="replace")
        found = re.findall(r"stat::number_of_executed_units: (\d+)", text)
        inputs += int(found[-1]) if found else 0
        new = _artifacts(out) - before
        crashes += len(new)
        for path in sorted(new):
            print(f"crash: {path}", file=sys.stderr)
        if not new:
            if not found:  # libFuzzer did not even start: show why
                sys.stderr.write(text[-2000:])
                raise SystemExit(1)
            break
        (out / f"{sorted(new)[0].name}.log").write_text(text)
    return inputs, crashes


def _dictionary(out: Path) -> Path:
    """libFuzzer tokens from the schema and the catalog, so mutations speak the format."""
    from fakegpu.topology import catalog
    from fakegpu.topology.model import FabricHealth, FabricState, FaultKind

    words = {"name", "seed", "driver", "version", "cuda_version", "fabrics", "nodes", "system",
             "gpus", "product", "count", "mig", "enabled", "instances", "profile", "placement",
             "nvlink", "mode", "switches", "fabric", "clique", "cluster_uuid", "state",
             "health", "faults", "gpu", "kind", "value", "none", "switched", "true", "false",
             "{0..17}", "{00..99}", "<<: ", "&a ", "*a", "!!str ", "- ", ": ", "0x", "1e9"}
    for key in catalog.products():
        words.add(key)
        product = catalog.lookup(key)
        if product is not None and product.mig is not None:
            words.update(p.name for p in product.mig.profiles)
    for enum in (FabricState, FabricHealth, FaultKind):
        words.update(str(e.value) for e in enum)
    path = out / "topology.dict"
    path.write_text("".join(f"{json.dumps(w)}\n" for w in sorted(words)))
    return path


def _artifacts(out: Path) -> set[Path]:
    return {p for p in out.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))}


# --- fallback: plain mutations, without coverage -------------------------------------------


def _mutate(rng: random.Random, pool: list[bytes]) -> bytes:
    data = bytearray(rng.choice(pool))
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(4)
        if op == 0 and data:  # change a byte
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:  # insert YAML punctuation or a number
            data[at:at] = rng.choice([b"{", b"}", b"[", b"]", b":", b"-", b"&a ", b"*a",
                                      b"<<: ", b"!!int ", b"\n  ", b"'", b'"',
                                      str(rng.choice([0, 1, 7, 8, 255, 2**32, -1])).encode()])
        elif op == 2:  # splice a piece of another input
            other = rng.choice(pool)
            start = rng.randrange(len(other) + 1)
            data[at:at] = other[start:start + rng.randrange(64)]
        else:  # delete a span
            del data[at:at + rng.randrange(16)]
    return bytes(data[:MAX_LEN])


def _plain(seconds: float, out: Path, timeout: int) -> tuple[int, int]:
    pool = [p.read_bytes() for p in SEEDS]
    rng = random.Random()
    deadline = time.monotonic() + seconds
    inputs = crashes = 0
    while time.monotonic() < deadline and crashes < MAX_CRASHES:
        data = _mutate(rng, pool)
        inputs += 1
        kind = ""
        try:
            with _cpu_limit(timeout):
                check(data)
        except CpuTimeout:
            kind = "timeout"
        except Exception:  # the contract allows nothing else
            kind = "crash"
        if kind:
            crashes += 1
            path = out / f"{kind}-{hashlib.sha1(data).hexdigest()}"
            path.write_bytes(data)
            print(f"crash: {path}", file=sys.stderr)
    return inputs, crashes


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _libfuzzer_child(float(sys.argv[2]), sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", type=float)
    parser.add_argument("--out", type=Path, default=ROOT / "fuzz" / "out" / "topology")
    parser.add_argument("--timeout", type=int, default=30,
                        help="CPU seconds per input (about 6 times the largest legal input's)")
    parser.add_argument("--wall-timeout", type=int, default=600,
                        help="clock seconds per input: only for an input blocked without CPU")
    parser.add_argument("--rss-mb", type=int, default=2048)
    parser.add_argument("--plain", action="store_true", help="no atheris, even if installed")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import atheris  # noqa: F401
        have_atheris = not args.plain
    except ImportError:
        have_atheris = False
    if have_atheris:
        inputs, crashes = _libfuzzer(args.seconds, args.out, args.timeout, args.wall_timeout,
                                     args.rss_mb)
    else:
        print("plain mutations, no coverage guidance (atheris not installed or --plain)",
              file=sys.stderr)
        inputs, crashes = _plain(args.seconds, args.out, args.timeout)
    print(f"fuzz topology: {inputs} inputs, {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
