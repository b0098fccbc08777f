"""Taints follow health both ways, read back from the real fake NVML library: each fault kind
injected into a node's state taints its device, and clearing it lifts the taint.

The watcher runs as in the plugin (an NVML event set plus a state reading at every turn) in a
fresh process (pynvml binds libnvidia-ml.so.1 once per process), against ``fakegpu.nvml.faults``
changing the node's state file from that same process, as ``fakegpu fault`` would from another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakegpu.nvml import env, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

_SCRIPT = """
import json, sys
from fakegpu.nvml import faults
from fakegpu.plugin import discovery, health
from fakegpu import drivers
from fakegpu.wait import NotYet, WaitTimeout, wait_for

path, mode, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
nvidia = mode == "nvidia"
if mode == "noevents":  # a library without event sets (NVML answers NOT_SUPPORTED)
    import pynvml
    def unsupported():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    pynvml.nvmlEventSetCreate = unsupported
inventory = discovery.discover(nvidia)
h = health.Health(drivers.FAKEGPU, nvidia)
w = health.EventWatcher(h, lambda: inventory, lambda: None)
w.start()
assert w.ready.wait(30)

def seen():
    return {n: sorted([t["key"].split("/", 1)[1], t.get("value", ""), t["effect"]] for t in ts)
            for n, ts in h.taints(inventory).items()}

out = []
for action, gpu, kind, value, expected in steps:
    getattr(faults, action)(path, gpu, kind, value)
    def settled():
        now = seen()
        if now != expected:
            raise NotYet(json.dumps(now))
        return now
    try:
        out.append(wait_for(settled, what="taints", timeout=20, interval=0.1))
    except WaitTimeout:
        out.append(seen())
w.stop()
print(json.dumps(out))
"""

NS, NONE = "NoSchedule", "None"
# (action, GPU, fault, value, the taints expected once the watcher has seen it)
FAKEGPU_STEPS: list[tuple[str, int, str | None, int | None, dict[str, Any]]] = [
    ("inject", 0, "xid", 79, {"gpu-0": [["xid", "79", NS]]}),
    ("clear", 0, "xid", None, {}),
    ("inject", 1, "ecc-dbe", None, {"gpu-1": [["ecc", "dbe", NS]]}),
    ("clear", 1, "ecc-dbe", None, {}),
    ("inject", 2, "nvlink-down", 2, {"gpu-2": [["nvlink-down", "2", NS]]}),
    ("inject", 2, "nvlink-down", 5, {"gpu-2": [["nvlink-down", "2_5", NS]]}),
    ("clear", 2, "nvlink-down", 2, {"gpu-2": [["nvlink-down", "5", NS]]}),
    ("clear", 2, "nvlink-down", None, {}),
    ("inject", 3, "fabric-degraded", None, {"gpu-3": [["fabric", "degraded", NS]]}),
    ("clear", 3, "fabric-degraded", None, {}),
    ("inject", 0, "xid", 13, {"gpu-0": [["xid", "13", NONE]]}),
    ("inject", 0, "ecc-dbe", None, {"gpu-0": [["ecc", "dbe", NS], ["xid", "13", NONE]]}),
    ("clear", 0, None, None, {}),  # every fault of the GPU
    ("inject", 0, "xid", 79, {"gpu-0": [["xid", "79", NS]]}),  # the same fault again
    # A lost GPU answers nothing: its XID 79 stays (gpu-lost itself comes from discovery).
    ("inject", 1, "gpu-lost", None, {"gpu-0": [["xid", "79", NS]], "gpu-1": [["xid", "79", NS]]}),
    ("clear", 1, "gpu-lost", None, {"gpu-0": [["xid", "79", NS]], "gpu-1": [["xid", "79", NS]]}),
    ("clear", 1, "xid", None, {"gpu-0": [["xid", "79", NS]]}),
]
# NVIDIA's driver acts on XID events only: the other faults taint nothing.
NVIDIA_STEPS: list[tuple[str, int, str | None, int | None, dict[str, Any]]] = [
    ("inject", 0, "xid", 48, {"gpu-0": [["xid", "48", NS]]}),
    ("inject", 1, "ecc-dbe", None, {"gpu-0": [["xid", "48", NS]]}),
    ("inject", 2, "nvlink-down", 2, {"gpu-0": [["xid", "48", NS]]}),
    ("inject", 3, "fabric-degraded", None, {"gpu-0": [["xid", "48", NS]]}),
    ("clear", 0, "xid", None, {}),
]


# Without events, what the GPUs' state shows still taints and lifts (an XID is only an event).
NO_EVENT_STEPS: list[tuple[str, int, str | None, int | None, dict[str, Any]]] = [
    ("inject", 1, "ecc-dbe", None, {"gpu-1": [["ecc", "dbe", NS]]}),
    ("inject", 2, "nvlink-down", 3, {"gpu-1": [["ecc", "dbe", NS]],
                                     "gpu-2": [["nvlink-down", "3", NS]]}),
    ("clear", 1, None, None, {"gpu-2": [["nvlink-down", "3", NS]]}),
    ("clear", 2, None, None, {}),
]


@pytest.mark.parametrize(("mode", "steps"), [("fakegpu", FAKEGPU_STEPS),
                                             ("nvidia", NVIDIA_STEPS),
                                             ("noevents", NO_EVENT_STEPS)])
def test_each_fault_taints_and_clearing_lifts_it(
        tmp_path: Path, mode: str, steps: list[tuple[str, int, str | None, int | None,
                                                     dict[str, Any]]]) -> None:
    topo = load_topology(FIXTURES / "gb200-mini.yaml")
    path = state.render(topo, topo.nodes[0].name, tmp_path / "node.state")
    environ = {**os.environ, **env.env(path)}
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(path), mode, json.dumps(steps)],
                         env=environ, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for step, seen in zip(steps, got, strict=True):
        assert seen == step[4], f"after {step[:4]}: {seen}"
