"""Run the benchmarks (`make bench`): each prints its table and writes its JSON under
reports/benchmarks/ (docs/benchmarks.md says what each measures and records a run).

By default only those that need no cluster: NVML calls (nvml_bench, nvml_peers: fakegpu vs
nvml-mock vs no-op), prepare latency (plugin_prepare in-process, and --compare against the
upstream example driver under a real apiserver: cached binaries, no cluster), e2e wall times
read from reports/junit*.xml. ``--cluster`` adds the ones that bring clusters up and down:
cluster_up (1, 4, 18 real nodes) and fleet_scheduler (100 and 1,000 simulated nodes); slow,
and on a shared machine hold its cluster lock around the whole run. Peers are built from
their own source outside the tree on first use (benchmarks/peers.py).

Usage: .venv/bin/python benchmarks/run.py [--cluster] [--only NAME,NAME] [--list]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "reports" / "benchmarks"


@dataclass(frozen=True)
class Bench:
    name: str
    args: tuple[str, ...]  # after `python benchmarks/`; {out} is the JSON file
    cluster: bool = False  # brings a cluster up: only with --cluster
    stdout_json: bool = False  # writes its JSON to stdout rather than to --json


BENCHES = (
    Bench("nvml_bench", ("nvml_bench.py",), stdout_json=True),
    Bench("nvml_peers", ("nvml_peers.py", "--json", "{out}")),
    Bench("plugin_prepare", ("plugin_prepare.py", "--json", "{out}")),
    Bench("plugin_prepare_compare", ("plugin_prepare.py", "--compare", "--json", "{out}")),
    Bench("e2e_times", ("e2e_times.py", "--json", "{out}")),
    Bench("cluster_up", ("cluster_up.py", "--cases", "1,4,18", "--json", "{out}"),
          cluster=True),
    Bench("fleet_scheduler", ("fleet_scheduler.py", "--json", "{out}"), cluster=True),
)


def selected(cluster: bool, only: list[str]) -> list[Bench]:
    if only:
        return [b for b in BENCHES if b.name in only]
    return [b for b in BENCHES if cluster or not b.cluster]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cluster", action="store_true",
                        help="also the benchmarks that bring clusters up (slow)")
    parser.add_argument("--only", default="", metavar="NAME,NAME",
                        help="just these (see --list)")
    parser.add_argument("--list", action="store_true", help="the benchmarks, and exit")
    parser.add_argument("--junit-dir", type=Path, default=REPO / "reports",
                        help="e2e_times reads the junit*.xml here (default %(default)s)")
    args = parser.parse_args(argv)
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - {b.name for b in BENCHES})
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; known: "
                     + ", ".join(b.name for b in BENCHES))
    if args.list:
        for b in BENCHES:
            print(f"{b.name:<24} {'cluster' if b.cluster else 'no cluster':<10} "
                  f"benchmarks/{' '.join(b.args)}")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    outcome = []
    for b in selected(args.cluster, only):
        out = OUT / f"{b.name}.json"
        cmd = [sys.executable, str(REPO / "benchmarks" / b.args[0]),
               *(a.replace("{out}", str(out)) for a in b.args[1:])]
        if b.name == "e2e_times":
            cmd += ["--dir", str(args.junit_dir)]
        print(f"\n>>> {b.name}: {' '.join(cmd[1:])}", flush=True)
        start = time.monotonic()
        if b.stdout_json:
            done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
            print(done.stdout, end="", flush=True)
            if done.returncode == 0:
                out.write_text(done.stdout)
        else:
            done = subprocess.run(cmd, cwd=REPO, check=False)
        outcome.append((b.name, done.returncode, time.monotonic() - start))
    print("\n>>> summary (JSON in reports/benchmarks/)")
    for name, rc, took in outcome:
        print(f"  {name:<24} {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {took:6.0f} s")
    return 1 if any(rc for _, rc, _ in outcome) else 0


if __name__ == "__main__":
    raise SystemExit(main())
