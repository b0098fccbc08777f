"""A Docker daemon kind can use: the user's if one runs, else one fakegpu starts.

Policy (never surprising a user): a Docker that already answers is used exactly as it is, and
only checked; fakegpu changes nothing about it. When none answers, fakegpu (as root) installs
Debian's ``docker.io`` if ``dockerd`` is missing and starts its own dockerd with a config of its
own (under ``paths.cache_dir()/docker``), registering the runc wrapper
(``fakegpu/cluster/runc_wrapper.py``) as the default runtime when this host's capability
bounding set lacks capabilities a privileged container asks for (see that file). That dockerd
keeps running after fakegpu exits (kind clusters live in it); ``stop_own_dockerd`` stops it
again, and only it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fakegpu import fsutil, hostpkgs, paths
from fakegpu.cluster import nodeconfig, process
from fakegpu.errors import MissingPrerequisite

WRAPPER_RUNTIME = "fakegpu-runc"
DOCKER_PACKAGES = ("docker.io",)


@dataclass(frozen=True)
class DockerHost:
    """The Docker daemon in use and whether fakegpu started it."""

    docker: Path  # the client executable
    ours: bool  # started by fakegpu (with the wrapper when needed)
    runtime_wrapper: bool  # privileged containers go through the wrapper


def state_dir() -> Path:
    return paths.cache_dir() / "docker"


def docker_client() -> Path | None:
    found = shutil.which("docker")
    return Path(found) if found else None


def daemon_answers(docker: Path, timeout: float = 15.0) -> bool:
    """Whether a Docker daemon answers the client's default endpoint."""
    try:
        res = subprocess.run([str(docker), "version", "--format", "{{.Server.Version}}"],
                             capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


def unavailable_reason() -> str | None:
    """Why Docker cannot be had on this host, or None when ``ensure`` can provide it."""
    docker = docker_client()
    if docker is not None and daemon_answers(docker):
        return None
    if os.geteuid() != 0:
        return "no Docker daemon answers and starting one needs root"
    if shutil.which("dockerd") is None and shutil.which("apt-get") is None:
        return "no Docker daemon answers, dockerd is not installed and there is no apt-get"
    return None


def daemon_config(wrapper: Path | None) -> dict[str, object]:
    """Our dockerd's daemon.json. Pure: tested without a host."""
    cfg: dict[str, object] = {
        # Images and containers persist across restarts in the usual place; only the config,
        # pid file and log are fakegpu's own.
        "data-root": "/var/lib/docker",
        "log-driver": "json-file",
        "log-opts": {"max-size": "20m", "max-file": "2"},
    }
    if wrapper is not None:
        cfg["runtimes"] = {WRAPPER_RUNTIME: {"path": str(wrapper)}}
        cfg["default-runtime"] = WRAPPER_RUNTIME
    return cfg


def ensure(console: Console | None = None) -> DockerHost:
    """A Docker daemon that can run privileged containers, started if none answers."""
    console = console or Console(stderr=True)
    docker = docker_client()
    if docker is not None and daemon_answers(docker):
        return DockerHost(docker, ours=False, runtime_wrapper=_uses_wrapper(docker))
    if os.geteuid() != 0:
        raise MissingPrerequisite("no Docker daemon answers; start one, or run as root so "
                                  "fakegpu can start its own")
    if shutil.which("dockerd") is None:
        hostpkgs.ensure(DOCKER_PACKAGES, why="Docker is needed for kind", console=console)
    docker = docker_client()
    dockerd, runc = shutil.which("dockerd"), shutil.which("runc")
    if docker is None or dockerd is None:
        raise MissingPrerequisite("docker/dockerd are still missing after installing docker.io")
    wrapper = None
    if nodeconfig.missing_caps():
        if runc is None:
            raise MissingPrerequisite("runc is not installed (Debian package runc)")
        wrapper = nodeconfig.install_wrapper(state_dir() / WRAPPER_RUNTIME, Path(runc))
    cfg = state_dir() / "daemon.json"
    fsutil.atomic_write(cfg, json.dumps(daemon_config(wrapper), indent=2) + "\n")
    pidfile = state_dir() / "dockerd.pid"
    if clear_stale_pidfile(pidfile):
        console.print(f"removed {pidfile}: it named no running dockerd")
    console.print(f"starting dockerd (config {cfg}, log {state_dir() / 'dockerd.log'})")
    rec = process.spawn("dockerd", [dockerd, "--config-file", str(cfg),
                                    "--pidfile", str(pidfile)],
                        state_dir() / "dockerd.log")
    fsutil.atomic_write(state_dir() / "dockerd.json", json.dumps(rec.to_json()) + "\n")
    process.wait_until("dockerd to answer", lambda: daemon_answers(docker, 5),
                       process.WaitPolicy(timeout=90, interval=1), watch=[rec])
    return DockerHost(docker, ours=True, runtime_wrapper=wrapper is not None)


def clear_stale_pidfile(pidfile: Path, proc: Path = Path("/proc")) -> bool:
    """Remove a pid file left by a dockerd that no longer runs; True when removed.

    dockerd refuses to start while its pid file names any live process, and after a reboot or
    a restored machine image that pid often belongs to something else. A file naming a running
    dockerd is kept: that one is the user's to stop.
    """
    try:
        pid = int(pidfile.read_text().strip())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        pid = 0
    try:
        comm = (proc / str(pid) / "comm").read_text().strip() if pid > 0 else ""
    except OSError:
        comm = ""
    if comm == "dockerd":
        return False
    pidfile.unlink(missing_ok=True)
    return True


def _uses_wrapper(docker: Path) -> bool:
    res = subprocess.run([str(docker), "info", "--format", "{{.DefaultRuntime}}"],
                         capture_output=True, text=True, timeout=30, check=False)
    return res.stdout.strip() == WRAPPER_RUNTIME


def own_dockerd() -> process.ProcessRecord | None:
    """The dockerd fakegpu started, if it still runs."""
    try:
        rec = process.ProcessRecord.from_json(
            json.loads((state_dir() / "dockerd.json").read_text()))
    except (OSError, ValueError, KeyError):
        return None
    return rec if process.is_alive(rec) else None


def stop_own_dockerd() -> bool:
    """Stop the dockerd fakegpu started (never another); False when none runs."""
    rec = own_dockerd()
    if rec is None:
        return False
    return process.terminate(rec, grace=30)
