"""Start, watch and stop the cluster's host processes; run commands; wait with one policy.

Every component runs detached (its own session and process group) with stdout and stderr in
one log file, so it outlives the `fakegpu cluster up` that started it. A ProcessRecord keeps the
pid together with the process start time from /proc, so a later `down` (another process)
kills exactly what `up` made and never a recycled pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import FakegpuError
from fakegpu.wait import WaitTimeout, until_true, wait_for

# Popen objects of children started by this process, so they are reaped (no zombies) and
# Python does not warn about still-running children when the objects are collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ComponentError(FakegpuError):
    """A component failed to start or to become ready; the message ends with its log tail."""


class CommandError(FakegpuError):
    """A command failed: the message carries the command line and its output."""

    def __init__(self, argv: Sequence[str], returncode: int | None, output: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        what = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"`{' '.join(argv)}` {what}: {_oneline(output)}")


def _oneline(text: str, limit: int = 600) -> str:
    flat = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return flat if len(flat) <= limit else "..." + flat[-limit:]


@dataclass(frozen=True)
class ProcessRecord:
    name: str  # component name, e.g. "kubelet/node-0"
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: identifies this incarnation of the pid
    argv0: str
    log: Path

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks,
                "argv0": self.argv0, "log": str(self.log)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProcessRecord:
        return cls(str(d["name"]), int(d["pid"]), int(d["start_ticks"]), str(d["argv0"]),
                   Path(d["log"]))


@dataclass(frozen=True)
class WaitPolicy:
    """One timeout / poll interval for every readiness wait."""

    timeout: float = 120.0
    interval: float = 0.5

    def scaled(self, factor: float) -> WaitPolicy:
        return WaitPolicy(self.timeout * factor, self.interval)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 overall, 20th after the name


def is_alive(rec: ProcessRecord) -> bool:
    """True while the very process of ``rec`` exists and is not a zombie."""
    _reap(rec.pid)
    fields = _stat_fields(rec.pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return int(fields[19]) == rec.start_ticks


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)


def _read_end(path: Path, size: int = 64 * 1024) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log file (empty if it does not exist)."""
    return "\n".join(_read_end(path).splitlines()[-lines:])


_START_MARKER = "\n=== fakegpu: starting "


def current_run_log(rec: ProcessRecord) -> str:
    """What the latest start of ``rec``'s component wrote (the end of its log, 64 KiB at most).

    Logs are appended to across restarts (``start_node``): an error a previous incarnation
    logged must not fail the wait for this one.
    """
    data = _read_end(rec.log)
    at = data.rfind(f"{_START_MARKER}{rec.name}:")
    return data if at < 0 else data[at + 1 :]


def fatal_line(rec: ProcessRecord, patterns: Sequence[re.Pattern[str]]) -> str | None:
    """The first line of ``rec``'s current run that matches one of ``patterns``, if any."""
    if not patterns:
        return None
    for line in current_run_log(rec).splitlines():
        if any(p.search(line) for p in patterns):
            return line.strip()
    return None


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessRecord:
    """Start ``argv`` detached with output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"{_START_MARKER}{name}: {' '.join(argv)}\n".encode())
        out.flush()
        try:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # own process group: terminate() signals the tree
                close_fds=True,
            )
        except OSError as err:
            raise ComponentError(f"{name}: cannot start {argv[0]}: {err}") from err
    _CHILDREN[child.pid] = child
    ticks = start_ticks(child.pid)
    if ticks is None:  # exited already, before we could look
        child.wait()
        _CHILDREN.pop(child.pid, None)
        raise ComponentError(f"{name} exited at once (code {child.returncode})\n{tail(log)}")
    return ProcessRecord(name, child.pid, ticks, str(argv[0]), log)


def terminate(rec: ProcessRecord, grace: float = 10.0) -> bool:
    """Stop ``rec`` and its process group: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns False when the process was already gone (nothing was signalled).
    """
    if not is_alive(rec):
        return False
    _signal_group(rec, signal.SIGTERM)
    if not gone_within([rec], grace):
        _signal_group(rec, signal.SIGKILL)
        gone_within([rec], 5.0)
    # Group members left behind (the leader exited first) get the same end.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(rec.pid, signal.SIGKILL)
    return True


def gone_within(recs: Sequence[ProcessRecord], seconds: float) -> bool:
    """Whether every process of ``recs`` has exited within ``seconds`` (polled each 0.1 s)."""
    try:
        wait_for(until_true(lambda: not any(is_alive(r) for r in recs)),
                 what="processes to exit", timeout=seconds, interval=0.1)
    except WaitTimeout:
        return False
    return True


def _signal_group(rec: ProcessRecord, sig: signal.Signals) -> None:
    try:
        if os.getpgid(rec.pid) == rec.pid:
            os.killpg(rec.pid, sig)
        else:
            os.kill(rec.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pids_matching(predicate: Callable[[list[str]], bool]) -> list[int]:
    """Pids whose argv (from /proc/<pid>/cmdline) satisfies ``predicate``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if argv and predicate(argv):
            found.append(int(entry))
    return found


def kill_pids(pids: Sequence[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, a set of pids found by ``pids_matching``."""
    recs = [ProcessRecord("pid", p, t, "", Path("/dev/null"))
            for p in pids if (t := start_ticks(p)) is not None]
    for r in recs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(r.pid, signal.SIGTERM)
    gone_within(recs, grace)
    for r in recs:
        if is_alive(r):
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.pid, signal.SIGKILL)


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a short command; a failure or timeout is a CommandError with its output."""
    try:
        res = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout,
            env=dict(env) if env is not None else None, input=input_text,
        )
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"") + (err.stderr or b"")
        text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)
        raise CommandError(argv, None, text) from err
    except OSError as err:
        raise CommandError(argv, 127, str(err)) from err
    if check and res.returncode != 0:
        raise CommandError(argv, res.returncode, res.stdout + res.stderr)
    return res


def wait_until(
    what: str,
    check: Callable[[], bool],
    policy: WaitPolicy,
    *,
    watch: Sequence[ProcessRecord] = (),
    fatal: Sequence[re.Pattern[str]] = (),
) -> None:
    """Poll ``check`` until it returns True, on fakegpu's one loop (``fakegpu.wait``).

    Fails early if a watched process dies, or if its log (since its latest start) has a line
    matching one of ``fatal``: a component can stay alive but never become ready
    (containerd whose CRI plugin failed to load keeps serving everything else), and waiting
    out the timeout then only hides the cause. It also fails on timeout. Every error names
    ``what`` and ends with a log tail: of the failed component, or on timeout of the first
    watched process (the component being waited for).

    Retry rule: a readiness probe of a component that is starting fails in many ways
    (connection refused, TLS not ready, 503, a half-written answer), so every ``Exception``
    from ``check`` counts as "not yet"; the last one is reported on timeout. A watched
    process that died ends the wait at once instead.
    """

    def guard() -> None:
        for rec in watch:
            if not is_alive(rec):
                raise ComponentError(
                    f"{rec.name} exited while waiting for {what}; log {rec.log}:\n{tail(rec.log)}"
                )
            line = fatal_line(rec, fatal)
            if line is not None:
                raise ComponentError(
                    f"{rec.name} failed while waiting for {what}: {_oneline(line, 300)}\n"
                    f"log {rec.log}:\n{tail(rec.log)}"
                )

    try:
        wait_for(until_true(check), what=what, timeout=policy.timeout,
                 interval=policy.interval, transient=(Exception,), guard=guard)
    except WaitTimeout as err:
        detail = f" (last error: {err.last_error})" if err.last_error else ""
        logs = "".join(f"\n--- {r.name} log {r.log}:\n{tail(r.log)}" for r in watch[:1])
        raise ComponentError(
            f"timed out after {policy.timeout:.0f}s waiting for {what}{detail}{logs}"
        ) from None
