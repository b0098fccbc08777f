"""``python -m fakegpu.node.host``, the chart's fake-node process, run as the DaemonSet runs it
(a process with NODE_NAME, the topology and one directory for the state and the host), and
read as a third-party driver reads it: NVML loaded from the driver root with no fakegpu
variable set (pynvml on the real library), the MIG capability files, the readiness endpoint.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fakegpu.topology.packaged import FIXTURES
from fakegpu.wait import NotYet, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="device nodes (mknod) need root")]

TOPOLOGY = FIXTURES / "nvidia-driver.yaml"
NODE = "nv-0"

LIST = """
import json, pynvml as n
n.nvmlInit()
print(json.dumps({"driver": n.nvmlSystemGetDriverVersion(),
                  "gpus": [n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i))
                           for i in range(n.nvmlDeviceGetCount())]}))
"""

MAKE_1G = """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
profile = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
gi = n.nvmlDeviceCreateGpuInstance(h, profile.id)
print(json.dumps(n.nvmlGpuInstanceGetInfo(gi).id))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    """The environment of a process that knows nothing of fakegpu."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("FAKEGPU_") and k != "LD_LIBRARY_PATH"}


def _pynvml(code: str, **env: str) -> object:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env={**_clean_env(), **env}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ready(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_node_host_gives_a_driver_that_knows_nothing_of_fakegpu_its_gpus(
        tmp_path: Path) -> None:
    root = tmp_path / "fakegpu"  # one hostPath in the chart: the state is hard-linked across
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fakegpu.node.host", "--host-dir", str(root / "nvhost"),
         "--probe-port", str(port)],
        env={**_clean_env(), "NODE_NAME": NODE, "FAKEGPU_TOPOLOGY": str(TOPOLOGY),
             "FAKEGPU_NVML_STATE_DIR": str(root / "nvml")},
        stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> None:
            if proc.poll() is not None:
                raise AssertionError(f"the node host exited {proc.returncode}: "
                                     f"{proc.stderr.read() if proc.stderr else ''}")
            try:
                code, text = _ready(port)
            except OSError as err:
                raise NotYet(f"GET /readyz: {err}") from None
            assert code == 200, text

        wait_for(ready, what="the node host to serve /readyz", timeout=120, interval=0.2)
        driver_root = root / "nvhost" / "driver"
        # A driver pointed at the driver root loads NVML from there and sees every GPU of
        # the node, with no fakegpu variable: the state is found beside the library.
        seen = _pynvml(LIST, LD_LIBRARY_PATH=str(driver_root / "usr" / "lib64"))
        assert isinstance(seen, dict)
        assert seen["driver"] == "580.95.05" and len(seen["gpus"]) == 4
        # So does the driver root's nvidia-smi (static: the NVML code is in the program), as
        # NVIDIA's plugin's init container runs it to check the driver (env -i).
        smi = subprocess.run([str(driver_root / "usr" / "bin" / "nvidia-smi"), "-L"], env={},
                             capture_output=True, text=True, timeout=60, check=False)
        assert smi.returncode == 0 and smi.stdout.count("GPU ") == 4, smi.stdout + smi.stderr
        # The same GPUs as the rendered state shows through fakegpu's own variable.
        state = root / "nvml" / f"{NODE}.state"
        from fakegpu.nvml import env as nvml_env

        assert _pynvml(LIST, **nvml_env.env(state)) == seen
        # Without the driver root, no GPUs (the library is not found at all).
        absent = subprocess.run([sys.executable, "-c", LIST], env=_clean_env(),
                                capture_output=True, text=True, timeout=60, check=False)
        assert absent.returncode != 0
        # A MIG instance made by anyone shows up as its capability file (what NVIDIA's
        # plugin reads for a MIG device's minor).
        caps = root / "nvhost" / "proc" / "driver" / "nvidia" / "capabilities"
        before = {p.relative_to(caps).as_posix() for p in caps.rglob("access")}
        gi = _pynvml(MAKE_1G, **nvml_env.env(state))

        def appeared() -> None:
            now = {p.relative_to(caps).as_posix() for p in caps.rglob("access")}
            if f"gpu0/mig/gi{gi}/access" not in now - before:
                raise NotYet(f"capability files: {sorted(now)}")

        wait_for(appeared, what="the new instance's capability file", timeout=30,
                 interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_node_the_topology_does_not_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu.node.host", "--host-dir", str(tmp_path / "nvhost")],
        env={**_clean_env(), "NODE_NAME": "elsewhere", "FAKEGPU_TOPOLOGY": str(TOPOLOGY),
             "FAKEGPU_NVML_STATE_DIR": str(tmp_path / "nvml")},
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "node 'elsewhere' is not in topology" in line
