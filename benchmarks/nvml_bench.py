"""Benchmark the fake NVML: calls per second through pynvml and from C, and the latency of an
injected XID reaching a process blocked in nvmlEventSetWait.

    .venv/bin/python benchmarks/nvml_bench.py [--topology dgx-h100]

Prints JSON; docs/nvml.md records a run. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from fakegpu.nvml import build, env, faults, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

ROOT = Path(__file__).resolve().parents[1]

PY_CALLS = """
import json, time, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
count = n.nvmlDeviceGetCount()
calls = {
    "nvmlDeviceGetHandleByIndex": lambda i: n.nvmlDeviceGetHandleByIndex(i % count),
    "nvmlDeviceGetName": lambda i: n.nvmlDeviceGetName(h),
    "nvmlDeviceGetMemoryInfo": lambda i: n.nvmlDeviceGetMemoryInfo(h),
    "nvmlDeviceGetMigMode": lambda i: n.nvmlDeviceGetMigMode(h),
    "nvmlDeviceGetNvLinkState": lambda i: n.nvmlDeviceGetNvLinkState(h, i % 18),
}
out = {}
for name, fn in calls.items():
    k = 50000
    t0 = time.perf_counter()
    for i in range(k):
        fn(i)
    out[name] = round(k / (time.perf_counter() - t0))
print(json.dumps(out))
"""

WAITER = """
import sys, time, pynvml as n
n.nvmlInit()
es = n.nvmlEventSetCreate()
n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(0), n.nvmlEventTypeXidCriticalError, es)
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    n.nvmlEventSetWait_v2(es, 10000)
    print(time.perf_counter_ns(), flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topology", default=str(FIXTURES / "dgx-h100.yaml"))
    parser.add_argument("--events", type=int, default=50)
    args = parser.parse_args()
    topo = load_topology(args.topology)
    with tempfile.TemporaryDirectory() as tmp:
        path = state.render(topo, topo.nodes[0], Path(tmp) / "bench.state")
        environ = dict(os.environ, **env.env(path))
        py = subprocess.run([sys.executable, "-c", PY_CALLS], env=environ, capture_output=True,
                            text=True, check=True)
        exe = Path(tmp) / "nvml_bench"
        subprocess.run(["gcc", "-O2", f"-I{build.find_header().parent}",
                        str(ROOT / "benchmarks" / "nvml_bench.c"), "-o", str(exe),
                        f"-L{env.libdir()}", "-l:libnvidia-ml.so.1"], check=True)
        c = subprocess.run([str(exe), "2000000"], env=environ, capture_output=True, text=True,
                           check=True)
        waiter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WAITER),
                                   str(args.events)], env=environ, stdout=subprocess.PIPE,
                                  text=True)
        assert waiter.stdout is not None
        waiter.stdout.readline()
        latencies = []
        for _ in range(args.events):
            sent = time.perf_counter_ns()
            faults.inject(path, 0, "xid", 48)
            received = int(waiter.stdout.readline())
            latencies.append((received - sent) / 1e6)
            time.sleep(0.01)
        waiter.wait(timeout=30)
    print(json.dumps({
        "machine": f"{os.cpu_count()} CPUs",
        "pynvml_calls_per_s": json.loads(py.stdout),
        "c_calls_per_s": json.loads(c.stdout),
        "xid_event_latency_ms": {
            "median": round(statistics.median(latencies), 3),
            "p95": round(sorted(latencies)[int(len(latencies) * 0.95) - 1], 3),
            "max": round(max(latencies), 3),
        },
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
