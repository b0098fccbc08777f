#!/bin/sh
''':'
# sh runs these lines and Python reads them as the module's docstring (a file both can run).
# Only a call that starts a process (create, run, exec) needs its spec rewritten, so only it
# pays for Python (~30 ms of CPU a start); start, kill, delete and state, 8 of a pod's 11 runc
# calls, go straight to runc: a pod cost about a fifth less CPU on the embedded provider.
skip=
for arg do
  if [ -n "$skip" ]; then skip=; continue; fi
  case $arg in
    --root|--log|--log-format|--criu|--rootless) skip=1 ;;
    -*) ;;
    create|run|exec) exec /usr/bin/python3 "$0" "$@" ;;
    *) break ;;
  esac
done
exec "${FAKEGPU_REAL_RUNC:-/usr/sbin/runc}" "$@"
'''
# An OCI runtime in front of runc that drops capabilities the host cannot grant.
#
# Why: on some VMs the capability bounding set of every process lacks a capability (here
# CAP_SYS_RESOURCE). A privileged container (which kind hard-codes for its nodes) asks runc for
# *every* capability, and runc's capset then fails with "unable to apply caps: operation not
# permitted". Dropping from the container's spec exactly the capabilities missing from our own
# bounding set makes such containers start, and loses nothing: no process here could hold them.
#
# Without CAP_SYS_RESOURCE a process also cannot lower its oom_score_adj below what it inherited,
# and runc's init fails on a spec asking for that ("failed to update /proc/self/oom_score_adj:
# Permission denied"); the kubelet asks -998 for every pod sandbox. Such a request is raised to our
# own value, the lowest this process tree may set.
#
# dockerd, containerd inside a kind node and the containerd of every embedded node call this file
# exactly as they would call runc; it rewrites the spec in place and execs the real runc, whose
# path is baked in by fakegpu when it installs the file (``REAL_RUNC``, see
# ``fakegpu.cluster.nodeconfig``) or given by $FAKEGPU_REAL_RUNC.
#
# Standalone on purpose (stdlib only, no fakegpu import): it runs under the system python3 of the
# host or of a node image, outside fakegpu's virtual environment. For the same reason it keeps its
# own temp file and rename instead of fakegpu.fsutil: the spec is in the runtime's own bundle,
# which nothing else reads before runc.

from __future__ import annotations

import json
import os
import sys

REAL_RUNC = "/usr/sbin/runc"  # replaced at install time
# Whether REAL_RUNC can apply seccomp filters (replaced at install time, from `runc features`).
# fakegpu's cached runc is built without libseccomp; handed a filter (kubeadm's static pods ask
# for RuntimeDefault) it refuses to start the container, so the filter is dropped instead: pods
# then run unconfined, exactly as on the embedded provider, which runs the same runc.
SECCOMP_SUPPORTED = True  # replaced at install time

# Linux capability numbers (include/uapi/linux/capability.h), as runc names them.
CAP_NAMES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
    "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
    "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
    "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
    "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
)
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def bounding_set(status_text: str) -> int:
    """The CapBnd mask of a /proc/<pid>/status text."""
    for line in status_text.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    raise ValueError("no CapBnd line in /proc/self/status")


def unavailable(mask: int) -> set[str]:
    """Names of the known capabilities missing from bounding set ``mask``."""
    return {name for bit, name in enumerate(CAP_NAMES) if not mask >> bit & 1}


def strip_caps(process: dict[str, object], drop: set[str]) -> list[str]:
    """Remove ``drop`` from every capability set of an OCI process object; return what went."""
    caps = process.get("capabilities")
    removed: set[str] = set()
    if isinstance(caps, dict):
        for key in CAP_SETS:
            values = caps.get(key)
            if isinstance(values, list):
                removed.update(v for v in values if v in drop)
                caps[key] = [v for v in values if v not in drop]
    return sorted(removed)


def clamp_oom_score_adj(process: dict[str, object], floor: int) -> bool:
    """Raise a requested oomScoreAdj below ``floor`` to ``floor``; True when changed."""
    wanted = process.get("oomScoreAdj")
    if isinstance(wanted, int) and wanted < floor:
        process["oomScoreAdj"] = floor
        return True
    return False


def drop_seccomp(doc: dict[str, object]) -> bool:
    """Remove linux.seccomp from an OCI config; True when there was one."""
    linux = doc.get("linux")
    if isinstance(linux, dict) and "seccomp" in linux:
        del linux["seccomp"]
        return True
    return False


def _option(argv: list[str], names: tuple[str, ...]) -> str | None:
    """The value of a ``--name value`` / ``--name=value`` option in ``argv``."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


# Global runc options that take a value: skipped when looking for the subcommand.
_GLOBAL_WITH_VALUE = ("--root", "--log", "--log-format", "--criu", "--rootless")


def subcommand(argv: list[str]) -> tuple[str | None, list[str]]:
    """runc's subcommand and the arguments after it."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg, argv[i + 1:]
    return None, []


def spec_file(argv: list[str]) -> tuple[str, bool] | None:
    """The JSON file to rewrite for this runc call and whether it is a whole config (True)
    or a bare process object (False); None when the call starts no process."""
    cmd, rest = subcommand(argv)
    if cmd in ("create", "run"):
        bundle = _option(rest, ("--bundle", "-b")) or os.getcwd()
        return os.path.join(bundle, "config.json"), True
    if cmd == "exec":
        proc = _option(rest, ("--process", "-p"))
        # Without --process the exec'd command comes from argv with default (non-privileged)
        # capabilities unless --cap is given; those are not rewritten here.
        return (proc, False) if proc else None
    return None


def rewrite(path: str, whole_config: bool, drop: set[str], oom_floor: int | None = None,
            *, seccomp: bool = True) -> list[str]:
    """Rewrite the spec at ``path``; return the capabilities removed."""
    with open(path) as f:
        doc = json.load(f)
    process = doc.get("process") if whole_config else doc
    removed: list[str] = []
    clamped = False
    if isinstance(process, dict):
        removed = strip_caps(process, drop)
        clamped = oom_floor is not None and clamp_oom_score_adj(process, oom_floor)
    # A filter is dropped even from a config without a process object.
    unfiltered = whole_config and not seccomp and drop_seccomp(doc)
    if removed or clamped or unfiltered:
        tmp = f"{path}.fakegpu-tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    return removed


def main(argv: list[str]) -> int:
    runc = os.environ.get("FAKEGPU_REAL_RUNC") or REAL_RUNC
    with open("/proc/self/status") as f:
        drop = unavailable(bounding_set(f.read()))
    target = spec_file(argv[1:])
    if (drop or not SECCOMP_SUPPORTED) and target is not None:
        floor = None
        if "CAP_SYS_RESOURCE" in drop:
            with open("/proc/self/oom_score_adj") as f:
                floor = int(f.read().strip())
        rewrite(target[0], target[1], drop, floor, seccomp=SECCOMP_SUPPORTED)
    os.execv(runc, [runc, *argv[1:]])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
