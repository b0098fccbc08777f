"""Benchmark: how long `fakegpu cluster up` takes, and how much memory the cluster holds.

For each topology (1, 4 and 18 worker nodes by default) it runs the real CLI:
``fakegpu cluster up`` (timed), ``fakegpu cluster status -o json``, sums the memory of
the cluster's processes once it is up, then ``fakegpu cluster down`` (timed).

- warm: the binaries and images are already cached (the usual case after the first run);
  ``fakegpu cluster binaries`` fills the cache first when needed, and is not counted.
- cold (``--cold``): every cache starts empty — fakegpu's (FAKEGPU_CACHE_DIR) and Go's
  (GOCACHE, GOMODCACHE) point into a fresh directory — so the binaries are built from the Go
  module proxy. Slow (tens of minutes per case on 2 cores) and network-heavy: opt-in.

Memory is that of every process whose command line names the cluster's directory (etcd,
apiserver, controllers, containerd, kubelets, plugins) plus their descendants (shims, pause and
pod processes): RSS summed (overcounts shared pages) and PSS summed (shares split fairly).
Only the embedded provider exposes its directory; this benchmark is for it.

Usage: .venv/bin/python benchmarks/cluster_up.py [--cases 1,4,18] [--repeat N] [--cold]
       [--json reports/benchmarks/cluster_up.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchlib import load_average, machine

from fakegpu.topology.packaged import FIXTURES

REPO = Path(__file__).resolve().parent.parent
CASES: dict[str, Path] = {
    "1": FIXTURES / "hgx-h200.yaml",  # one node, 8 GPUs
    "4": FIXTURES / "gb200-mini.yaml",  # 4 nodes x 4 GB200
    "18": FIXTURES / "gb200-nvl72.yaml",  # 18 nodes x 4 GB200
}
CLUSTER = "fg-bench"  # its own name: never a cluster someone else is using


@dataclass
class Run:
    nodes: int
    topology: str
    mode: str  # "warm" | "cold"
    up_s: float
    down_s: float
    processes: int
    rss_mib: float
    pss_mib: float
    k8s_version: str
    load_before: list[float] = field(default_factory=list)  # 1/5/15 min, before `up`
    load_after: list[float] = field(default_factory=list)  # after `down`
    error: str = ""  # why `up` failed (the run's other numbers are then meaningless)


def fakegpu(args: list[str], env: dict[str, str] | None = None, timeout: float = 7200
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False, cwd=REPO)


def checked(out: subprocess.CompletedProcess[str], what: str) -> str:
    if out.returncode != 0:
        raise SystemExit(f"{what} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


# --- memory ---------------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def cluster_pids(cluster_dir: str) -> set[int]:
    roots = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cluster_dir in cmdline:
            roots.add(int(entry.name))
    kids = _children()
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(kids.get(pid, ()))
    return seen


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory(pids: Iterable[int]) -> tuple[float, float]:
    """(RSS, PSS) summed over ``pids``, in MiB."""
    rss = pss = 0
    for pid in pids:
        rss += _kib(Path(f"/proc/{pid}/status"), "VmRSS")
        pss += _kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss")
    return rss / 1024, pss / 1024


# --- one case -------------------------------------------------------------------------------------


def one_run(nodes: int, topology: Path, mode: str, env: dict[str, str], timeout: float) -> Run:
    load_before = load_average()
    if fakegpu(["cluster", "status", "--cluster", CLUSTER], env).returncode == 0:
        raise SystemExit(f"a cluster named {CLUSTER!r} exists: `fakegpu cluster down --cluster "
                         f"{CLUSTER}` first")
    start = time.monotonic()
    out = fakegpu(["cluster", "up", "--cluster", CLUSTER, "--topology", str(topology),
                   "--timeout", str(timeout)], env)
    up_s = time.monotonic() - start
    pids: set[int] = set()
    rss = pss = 0.0
    version = error = ""
    try:
        if out.returncode != 0:
            # Recorded, not fatal: the other cases still run, and the table says what failed.
            lines = out.stderr.strip().splitlines() or ["(no output)"]
            error = f"cluster up exited {out.returncode}: {lines[-1]}"
        else:
            status = json.loads(checked(fakegpu(["cluster", "status", "--cluster", CLUSTER,
                                                 "-o", "json"], env), "cluster status"))
            version = status["k8s_version"]
            pids = cluster_pids(status["dir"])
            rss, pss = memory(pids)
    finally:
        start = time.monotonic()
        down = fakegpu(["cluster", "down", "--cluster", CLUSTER], env)
        down_s = time.monotonic() - start
        checked(down, "cluster down")
    return Run(nodes=nodes, topology=topology.name, mode=mode, up_s=round(up_s, 1),
               down_s=round(down_s, 1), processes=len(pids), rss_mib=round(rss),
               pss_mib=round(pss), k8s_version=version, load_before=load_before,
               load_after=load_average(), error=error)


def cold_env(root: Path) -> dict[str, str]:
    return {**os.environ, "FAKEGPU_CACHE_DIR": str(root / "fakegpu"),
            "GOCACHE": str(root / "go-build"), "GOMODCACHE": str(root / "go-mod")}


def table(runs: list[Run]) -> str:
    head = (f"{'nodes':>5} {'topology':<18} {'mode':<5} {'up s':>7} {'down s':>7} "
            f"{'procs':>6} {'RSS MiB':>8} {'PSS MiB':>8}  load before/after")
    rows = [f"{r.nodes:>5} {r.topology:<18} {r.mode:<5} {r.up_s:>7.1f} {r.down_s:>7.1f} "
            + (f"FAILED: {r.error}" if r.error else
               f"{r.processes:>6} {r.rss_mib:>8.0f} {r.pss_mib:>8.0f}  "
               f"{r.load_before[0] if r.load_before else 0:.1f}/"
               f"{r.load_after[0] if r.load_after else 0:.1f}") for r in runs]
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", default="1,4,18",
                        help="worker-node counts to run, from 1,4,18 (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="warm runs per case")
    parser.add_argument("--cold", action="store_true",
                        help="also one cold run per case (empty caches; builds everything)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="per readiness wait inside `cluster up` (seconds)")
    parser.add_argument("--json", type=Path,
                        default=REPO / "reports" / "benchmarks" / "cluster_up.json")
    args = parser.parse_args(argv)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")

    runs: list[Run] = []
    warm_env = dict(os.environ)
    for case in wanted:
        topology = CASES[case]
        if args.cold:
            with tempfile.TemporaryDirectory(prefix="fakegpu-cold-") as root:
                runs.append(one_run(int(case), topology, "cold", cold_env(Path(root)),
                                    args.timeout))
                print(table(runs[-1:]).splitlines()[-1], flush=True)
        else:
            # Fill the binaries and images cache first (not counted): "warm" must be warm.
            checked(fakegpu(["cluster", "binaries"], warm_env), "cluster binaries")
        for _ in range(args.repeat):
            runs.append(one_run(int(case), topology, "warm", warm_env, args.timeout))
            print(table(runs[-1:]).splitlines()[-1], flush=True)

    print()
    print(table(runs))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": machine(), "runs": [asdict(r) for r in runs]},
                                    indent=2) + "\n")
    print(f"\nwritten {args.json}")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
