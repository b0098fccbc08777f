"""Library lifetime: calls racing the final nvmlShutdown, and handles and event sets across
nvmlShutdown + nvmlInit on the same or another node's file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fakegpu.nvml import build, env

from .conftest import py_json, render_node, topology

pytestmark = pytest.mark.integration

# Threads keep calling while the main thread shuts the library down under them, many times:
# every call must answer (SUCCESS or UNINITIALIZED), none may touch an unmapped file.
RACE_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <nvml.h>

static volatile int stop;

static void *caller(void *arg)
{
    (void)arg;
    while (!stop) {
        nvmlDevice_t h;
        char name[96];
        unsigned int cur, pend, count;
        nvmlMemory_t mem;
        nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(0, &h);
        if (rc == NVML_SUCCESS) rc = nvmlDeviceGetName(h, name, sizeof(name));
        if (rc == NVML_SUCCESS) rc = nvmlDeviceGetMigMode(h, &cur, &pend);
        if (rc == NVML_SUCCESS) rc = nvmlDeviceGetMemoryInfo(h, &mem);
        if (rc == NVML_SUCCESS) rc = nvmlDeviceGetMaxMigDeviceCount(h, &count);
        if (rc != NVML_SUCCESS && rc != NVML_ERROR_UNINITIALIZED &&
            rc != NVML_ERROR_INVALID_ARGUMENT) {
            fprintf(stderr, "unexpected %d\n", rc);
            exit(3);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = atoi(argv[1]);
    for (int r = 0; r < rounds; r++) {
        if (nvmlInit_v2() != NVML_SUCCESS) return 2;
        stop = 0;
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, caller, NULL);
        struct timespec ts = {0, 20000 + (r % 7) * 30000};
        nanosleep(&ts, NULL);
        nvmlShutdown();   /* the final one: it unmaps the state file */
        nanosleep(&ts, NULL);
        stop = 1;
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    puts("ok");
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_calls_racing_shutdown(tmp_path: Path) -> None:
    """issue 15: a call racing the final nvmlShutdown in another thread segfaulted."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    src = tmp_path / "race.c"
    src.write_text(RACE_C)
    exe = tmp_path / "race"
    lib = env.libdir()
    subprocess.run(["gcc", "-O1", "-pthread", f"-I{build.find_header().parent}", str(src),
                    "-o", str(exe), f"-L{lib}", "-l:libnvidia-ml.so.1"], check=True)
    proc = subprocess.run([str(exe), "300"], env=dict(os.environ, **env.env(path)),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr)


STALE = """
import json, os, pynvml as n
from fakegpu.nvml import faults
def code(fn, *a):
    try:
        r = fn(*a); return r.decode() if isinstance(r, bytes) else r
    except n.NVMLError as e:
        return e.value
a, b = os.environ["FAKEGPU_NVML_STATE"], os.environ["OTHER_STATE"]
out = {}
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
es = n.nvmlEventSetCreate()
n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es)
n.nvmlShutdown()
n.nvmlInit()  # the same node again: handles and event sets keep working
faults.inject(a, 0, "xid", 31)
out["same_name"] = code(n.nvmlDeviceGetName, h)
out["same_event"] = code(lambda: n.nvmlEventSetWait_v2(es, 5000).eventData)
n.nvmlShutdown()
os.environ["FAKEGPU_NVML_STATE"] = b
n.nvmlInit()  # another node: the old handle and set name nothing here
faults.inject(b, 0, "xid", 43)
out["other_name"] = code(n.nvmlDeviceGetName, h)
out["other_event"] = code(n.nvmlEventSetWait_v2, es, 200)
out["other_register"] = code(n.nvmlDeviceRegisterEvents, n.nvmlDeviceGetHandleByIndex(0),
                             n.nvmlEventTypeXidCriticalError, es)
out["free"] = code(n.nvmlEventSetFree, es)
out["fresh_name"] = code(n.nvmlDeviceGetName, n.nvmlDeviceGetHandleByIndex(0))
print(json.dumps(out))
"""


def test_stale_handles_and_event_sets(tmp_path: Path) -> None:
    """issue 15: after re-init on another node's file a stale handle named the new node's
    GPU, and an old event set never fired again."""
    h100 = topology("dgx-h100")
    h200 = topology("hgx-h200")
    a = render_node(tmp_path, h100, h100.nodes[0].name)
    b = render_node(tmp_path, h200, h200.nodes[0].name)
    got = py_json(a, STALE, extra_env={"OTHER_STATE": str(b)})
    assert got == {
        "same_name": h100.nodes[0].gpus[0].product.name, "same_event": 31,
        "other_name": 2, "other_event": 2, "other_register": 2, "free": None,  # 2: INVALID_ARGUMENT
        "fresh_name": h200.nodes[0].gpus[0].product.name,
    }
