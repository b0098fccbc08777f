"""fakegpu as another project uses it: the wheel built from this tree, installed into a fresh
venv outside the tree, driven from a scratch project directory.

The wheel is built from a copy of the working tree's files (tracked and new, not ignored), so
nothing the checkout built (the editable install's library, stubs, programs) can leak into it
and nothing is left in the tree. The venv gets the wheel and its dependencies from PyPI (pip's
cache makes a second run quick); nothing of the checkout's venv is visible in it. Every check
runs the venv's own ``fakegpu`` or ``python`` with the scratch project as working directory,
``CC`` pointing nowhere, so a command that tried to compile what the wheel should carry fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakegpu.cluster import prereq

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    project: Path  # the scratch project: the working directory of every command
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 300, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.venv / "bin" / argv[0]), *argv[1:]]
        res = subprocess.run(cmd, cwd=self.project, env=self.env, capture_output=True,
                             text=True, timeout=timeout, check=False)
        if check:
            assert res.returncode == 0, f"{argv}: rc {res.returncode}\n{res.stdout}{res.stderr}"
        return res


def _copy_tree(dest: Path) -> None:
    """The files git would commit now (tracked and untracked-not-ignored), links kept."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dest / rel)
        else:
            shutil.copy2(src, dest / rel)


def _clean_env(tmp: Path) -> dict[str, str]:
    """This process's environment without anything that points at the checkout or its venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "FAKEGPU_NVML_STATE",
                        "LD_LIBRARY_PATH", "LD_PRELOAD", "XDG_RUNTIME_DIR"}}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    env["CC"] = str(tmp / "no-compiler")  # the wheel carries its compiled parts
    runtime = tmp / "run"
    runtime.mkdir()
    env["XDG_RUNTIME_DIR"] = str(runtime)  # NVML state of this test only
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("outside")
    assert not tmp.resolve().is_relative_to(ROOT)
    src, dist = tmp / "src", tmp / "dist"
    _copy_tree(src)
    # The checkout's venv has the build requirements (the `build` extra): no isolation needed.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=900)
    (wheel,) = dist.glob("fakegpu-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    f"{wheel}[conformance]"], check=True, capture_output=True, timeout=900)
    project = tmp / "project"
    project.mkdir()
    yield Installed(wheel, venv, project, _clean_env(tmp))


def test_the_wheel_is_tagged_for_any_python_on_this_platform(installed: Installed) -> None:
    name = installed.wheel.name
    assert name.startswith("fakegpu-") and "-py3-none-manylinux_" in name, name
    with zipfile.ZipFile(installed.wheel) as zf:
        names = set(zf.namelist())
        wheel_meta = zf.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert "Root-Is-Purelib: false" in wheel_meta
    for part in ("fakegpu/nvml/lib/libnvidia-ml.so.1", "fakegpu/nvidiasmi/bin/nvidia-smi",
                 "fakegpu/bandwidth/bin/nvbandwidth", "fakegpu/podresources/bin/podresources",
                 "fakegpu/kubeletplugin/proto/dra_v1_pb2.py",
                 "fakegpu/topology/fixtures/dgx-h100.yaml", "fakegpu/deploy/chart/Chart.yaml",
                 "fakegpu/deploy/chart/templates/daemonset.yaml",
                 "fakegpu/deploy/chart/files/rbac.yaml", "fakegpu/cluster/kind/Dockerfile"):
        assert part in names, part


def test_the_packaged_topologies_work_from_a_scratch_project(installed: Installed) -> None:
    listed = installed.run("fakegpu", "topology", "list").stdout
    assert any(line.split()[0] == "dgx-h100" for line in listed.splitlines()), listed
    shown = installed.run("fakegpu", "topology", "show", "dgx-h100").stdout
    assert shown.startswith("# dgx-h100: 1 node(s), 8 GPU(s)"), shown
    where = Path(installed.run("fakegpu", "topology", "path", "gb200-mini").stdout.strip())
    assert where.is_relative_to(installed.venv), where
    config = installed.run("fakegpu", "kind", "config", "--k8s-version", "1.37").stdout
    assert "gb200-0" in config  # the default topology's nodes, from the package


def test_pynvml_loads_the_packaged_library(installed: Installed) -> None:
    exports = installed.run("fakegpu", "nvml", "env", "--topology", "dgx-h100").stdout
    env = dict(installed.env)
    for line in exports.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = subprocess.run(["sh", "-c", f"printf %s {value}"], capture_output=True,
                                  text=True, check=True).stdout
    script = ("import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); "
              "print(n.nvmlDeviceGetCount(), n.nvmlDeviceGetName(h))")
    res = subprocess.run([str(installed.venv / "bin" / "python"), "-c", script],
                         cwd=installed.project, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "8 NVIDIA H100 80GB HBM3"
    libdir = Path(installed.run("fakegpu", "nvml", "libdir").stdout.strip())
    assert libdir.is_relative_to(installed.venv), libdir  # the wheel's, not a build's


def test_the_static_programs_come_built(installed: Installed) -> None:
    script = ("from fakegpu import nvidiasmi; from fakegpu.bandwidth import program; "
              "print(nvidiasmi.path()); print(program.path())")
    smi, nvbandwidth = map(Path, installed.run("python", "-c", script).stdout.split())
    assert smi.is_relative_to(installed.venv) and nvbandwidth.is_relative_to(installed.venv)
    assert os.access(smi, os.X_OK) and os.access(nvbandwidth, os.X_OK)


def test_the_plugin_images_wheel_is_made_from_the_installed_package(
        installed: Installed, tmp_path: Path) -> None:
    """What ``fakegpu kind image`` puts in the image without a source tree (no Docker here):
    the installed distribution packed back, the same files as the wheel it came from."""
    script = ("import sys; from pathlib import Path; from fakegpu.cluster.kind import image, "
              "wheelhouse; image.check_inputs(); print(wheelhouse.repack(Path(sys.argv[1])))")
    repacked = Path(installed.run("python", "-c", script, str(tmp_path)).stdout.strip())
    assert repacked.name == installed.wheel.name

    def contents(whl: Path) -> dict[str, bytes]:
        with zipfile.ZipFile(whl) as zf:
            return {n: zf.read(n) for n in zf.namelist() if not n.endswith("/RECORD")}

    assert contents(repacked) == contents(installed.wheel)


def test_a_scratch_projects_pytest_runs_with_the_installed_plugin(installed: Installed) -> None:
    (installed.project / "test_own.py").write_text(
        "def test_own():\n    assert True\n")
    res = installed.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout
    helped = installed.run("python", "-m", "pytest", "--help").stdout
    assert "fakegpu" in helped  # the plugin came in through the wheel's pytest11 entry point


def test_cluster_up_on_embedded_with_the_packaged_default_topology(
        installed: Installed, request: pytest.FixtureRequest) -> None:
    """`fakegpu cluster up` of the installed wheel, from the scratch project, as a user runs it
    (root and the cached Kubernetes binaries of this host)."""
    missing = prereq.missing_prerequisites(
        "embedded", prereq.probe_host("embedded", request.config.getoption("fakegpu_k8s_version")))
    if missing:
        pytest.skip("; ".join(missing))
    name = f"{request.config.getoption('fakegpu_cluster_name')}-whl"[:20]
    installed.run("fakegpu", "cluster", "down", "--cluster", name, check=False)
    try:
        installed.run("fakegpu", "cluster", "up", "--cluster", name, timeout=1200)
        status = json.loads(installed.run("fakegpu", "cluster", "status", "--cluster", name,
                                          "-o", "json").stdout)
        assert Path(status["topology"]).is_relative_to(installed.venv), status
        workers = [n["name"] for n in status["nodes"] if n["role"] == "worker"]
        assert len(workers) == 4, status  # gb200-mini: 4 nodes x 4 GPUs, Ready with slices
    finally:
        installed.run("fakegpu", "cluster", "down", "--cluster", name, check=False)
