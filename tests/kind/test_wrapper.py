"""The capability-dropping runtime wrapper and the dockerd config (pure parts), plus the image
entrypoint's refusal of unknown nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cluster import nodeconfig, runc_wrapper
from fakegpu.cluster.kind import dockerhost
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.node import entrypoint
from fakegpu.topology.packaged import FIXTURES

ALL_CAPS = (1 << len(runc_wrapper.CAP_NAMES)) - 1


def test_unavailable_names_the_missing_bits() -> None:
    mask = ALL_CAPS & ~(1 << 24)  # CAP_SYS_RESOURCE is capability 24
    assert runc_wrapper.unavailable(mask) == {"CAP_SYS_RESOURCE"}
    assert runc_wrapper.unavailable(ALL_CAPS) == set()


def test_bounding_set_is_read_from_status() -> None:
    status = "Name:\tx\nCapBnd:\t000001fffeffffff\nCapAmb:\t0\n"
    assert runc_wrapper.bounding_set(status) == 0x1FFFEFFFFFF


@pytest.mark.parametrize(("argv", "want"), [
    (["--root", "/r", "--log", "/l", "create", "--bundle", "/b", "id"], ("/b/config.json", True)),
    (["run", "-b", "/b", "id"], ("/b/config.json", True)),
    (["--log-format", "json", "exec", "--process", "/p.json", "--detach", "id"],
     ("/p.json", False)),
    (["exec", "-t", "id", "sh"], None),
    (["start", "id"], None),
    (["delete", "--force", "id"], None),
])
def test_spec_file_for_each_runc_call(argv: list[str], want: tuple[str, bool] | None) -> None:
    assert runc_wrapper.spec_file(argv) == want


def test_rewrite_strips_only_unavailable_caps(tmp_path: Path) -> None:
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    cfg = {"ociVersion": "1.0.2", "process": {"capabilities": {
        k: list(caps) for k in runc_wrapper.CAP_SETS}}, "root": {"path": "rootfs"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    removed = runc_wrapper.rewrite(str(path), True, {"CAP_SYS_RESOURCE"})
    assert removed == ["CAP_SYS_RESOURCE"]
    after = json.loads(path.read_text())
    for k in runc_wrapper.CAP_SETS:
        assert after["process"]["capabilities"][k] == ["CAP_CHOWN", "CAP_SYS_ADMIN"]
    assert after["root"] == cfg["root"]


def test_installed_wrapper_execs_the_real_runtime_with_a_rewritten_spec(tmp_path: Path) -> None:
    # A stand-in "runc" that prints its argv and the spec it was handed.
    fake = tmp_path / "runc"
    fake.write_text(f"#!{sys.executable}\nimport sys, json\n"
                    "print(json.dumps({'argv': sys.argv[1:], "
                    "'caps': json.load(open(sys.argv[-1]))['capabilities']['bounding']}))\n")
    fake.chmod(0o755)
    wrapper = nodeconfig.install_wrapper(tmp_path / "fakegpu-runc", fake)
    proc = tmp_path / "process.json"
    missing = sorted(runc_wrapper.unavailable(
        runc_wrapper.bounding_set(Path("/proc/self/status").read_text())))
    proc.write_text(json.dumps({"capabilities": {"bounding": ["CAP_KILL", *missing]}}))
    out = subprocess.run([str(wrapper), "exec", "--process", str(proc), str(proc)],
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    seen = json.loads(out.stdout)
    assert seen["argv"] == ["exec", "--process", str(proc), str(proc)]
    assert seen["caps"] == ["CAP_KILL"]  # whatever this host lacks is gone, the rest stays


@pytest.mark.parametrize(("argv", "through_python"), [
    (["--root", "/r", "--log", "/l.json", "--log-format", "json", "start", "id"], False),
    (["--root", "/r", "kill", "id", "9"], False),
    (["delete", "--force", "id"], False),
    (["--debug", "state", "id"], False),
    (["--root", "/r", "--log-format", "json", "create", "--bundle", "/b", "id"], True),
    (["run", "-b", "/b", "id"], True),
    (["exec", "--process", "/p.json", "id"], True),
    # An option's value that reads like a subcommand is skipped, as Python's subcommand() does.
    (["--root", "create", "start", "id"], False),
])
def test_only_calls_that_start_a_process_pay_for_python(
        tmp_path: Path, argv: list[str], through_python: bool) -> None:
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\necho \"runc $*\"\n")
    fake.chmod(0o755)
    # A "python" that only says it ran: which path a call took, and with what.
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"python $*\"\n")
    python.chmod(0o755)
    wrapper = nodeconfig.install_wrapper(tmp_path / "fakegpu-runc", fake, seccomp=False,
                                         python=str(python))
    out = subprocess.run([str(wrapper), *argv], capture_output=True, text=True, check=True)
    want = f"python {wrapper} " if through_python else "runc "
    assert out.stdout == want + " ".join(argv) + "\n"


def test_the_sh_path_honours_fakegpu_real_runc(tmp_path: Path) -> None:
    other = tmp_path / "other-runc"
    other.write_text("#!/bin/sh\necho \"other $*\"\n")
    other.chmod(0o755)
    wrapper = nodeconfig.install_wrapper(tmp_path / "fakegpu-runc", tmp_path / "runc",
                                         seccomp=False, python="/bin/false")
    out = subprocess.run([str(wrapper), "start", "id"], capture_output=True, text=True,
                         check=True, env={**os.environ, "FAKEGPU_REAL_RUNC": str(other)})
    assert out.stdout == "other start id\n"


def test_a_path_the_sh_part_cannot_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FakegpuError, match="not a plain path"):
        nodeconfig.wrapper_text('/opt/my "runc"', seccomp=True)


def test_daemon_config_registers_the_wrapper_only_when_needed(tmp_path: Path) -> None:
    with_wrapper = dockerhost.daemon_config(tmp_path / "w")
    assert with_wrapper["default-runtime"] == dockerhost.WRAPPER_RUNTIME
    assert with_wrapper["runtimes"] == {dockerhost.WRAPPER_RUNTIME: {"path": str(tmp_path / "w")}}
    assert "default-runtime" not in dockerhost.daemon_config(None)


def test_entrypoint_refuses_a_node_not_in_the_topology(tmp_path: Path) -> None:
    env = {"NODE_NAME": "nope", "FAKEGPU_TOPOLOGY": str(FIXTURES / "gb200-mini.yaml"),
           "FAKEGPU_NVML_STATE_DIR": str(tmp_path)}
    with pytest.raises(InvalidInput, match="'nope' is not in topology"):
        entrypoint.plugin_env(env)


def test_entrypoint_renders_the_named_nodes_state(tmp_path: Path) -> None:
    env = {"NODE_NAME": "gb200-2", "FAKEGPU_TOPOLOGY": str(FIXTURES / "gb200-mini.yaml"),
           "FAKEGPU_NVML_STATE_DIR": str(tmp_path)}
    out, node = entrypoint.plugin_env(env)
    assert node == "gb200-2"
    assert Path(out["FAKEGPU_NVML_STATE"]) == (tmp_path / "gb200-2.state").resolve()
    assert Path(out["FAKEGPU_NVML_STATE"]).stat().st_size > 0
    assert "libnvidia" not in out["LD_LIBRARY_PATH"] and out["LD_LIBRARY_PATH"]


def test_oom_score_adj_below_the_floor_is_raised(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"process": {"oomScoreAdj": -998, "capabilities": {}}}))
    runc_wrapper.rewrite(str(path), True, {"CAP_SYS_RESOURCE"}, oom_floor=-500)
    assert json.loads(path.read_text())["process"]["oomScoreAdj"] == -500
    path.write_text(json.dumps({"process": {"oomScoreAdj": 100}}))
    runc_wrapper.rewrite(str(path), True, {"CAP_SYS_RESOURCE"}, oom_floor=-500)
    assert json.loads(path.read_text())["process"]["oomScoreAdj"] == 100  # above: untouched


def test_seccomp_is_dropped_only_for_a_runc_without_it(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    cfg = {"process": {}, "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}}}
    path.write_text(json.dumps(cfg))
    runc_wrapper.rewrite(str(path), True, set(), seccomp=True)
    assert "seccomp" in json.loads(path.read_text())["linux"]
    runc_wrapper.rewrite(str(path), True, set(), seccomp=False)
    assert "seccomp" not in json.loads(path.read_text())["linux"]


def test_seccomp_support_is_read_from_runc_features() -> None:
    import shutil

    from fakegpu.cluster.artifacts import binaries

    found = [Path(p) for p in (shutil.which("runc"),) if p]
    cached = binaries.cached()
    if cached is not None:
        found.append(cached.runc)
    assert found, "no runc on this host and none cached"
    for runc in found:
        # A runc linked with libseccomp names its version in `runc --version`.
        version = subprocess.run([str(runc), "--version"], capture_output=True, text=True,
                                 check=True).stdout
        assert nodeconfig.seccomp_supported(runc) is ("libseccomp" in version), runc


def test_entrypoint_keeps_the_nodes_state_across_restarts_until_the_topology_changes(
        tmp_path: Path) -> None:
    topo = tmp_path / "topology.yaml"
    topo.write_text((FIXTURES / "gb200-mini.yaml").read_text())
    env = {"NODE_NAME": "gb200-2", "FAKEGPU_TOPOLOGY": str(topo),
           "FAKEGPU_NVML_STATE_DIR": str(tmp_path / "state")}
    state = Path(entrypoint.plugin_env(env)[0]["FAKEGPU_NVML_STATE"])
    first = state.read_bytes()
    # A plugin restart (an upgrade): what happened to the GPUs at run time stays.
    state.write_bytes(first[:-1] + bytes([first[-1] ^ 1]))
    entrypoint.plugin_env(env)
    assert state.read_bytes() != first
    # Another topology (even the same nodes, a comment more): rendered anew.
    topo.write_text(topo.read_text() + "\n# changed\n")
    entrypoint.plugin_env(env)
    assert state.read_bytes() == first


def test_a_pid_file_naming_no_running_dockerd_is_removed(tmp_path: Path) -> None:
    # After a restored machine image the old pid may be another live process: dockerd would
    # refuse to start ("pid file found") on it.
    proc = tmp_path / "proc"
    for pid, comm in ((41, "python3"), (42, "dockerd")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    pidfile = tmp_path / "dockerd.pid"
    assert not dockerhost.clear_stale_pidfile(pidfile, proc)  # none there
    pidfile.write_text("42")
    assert not dockerhost.clear_stale_pidfile(pidfile, proc) and pidfile.exists()
    for stale in ("41", "43", "garbage"):
        pidfile.write_text(stale)
        assert dockerhost.clear_stale_pidfile(pidfile, proc) and not pidfile.exists()
