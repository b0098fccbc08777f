"""Spawning, identifying and stopping real (tiny) processes; waits and command errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from fakegpu.cluster import process
from fakegpu.cluster.process import CommandError, ComponentError, WaitPolicy


def test_spawn_logs_and_terminate(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    rec = process.spawn("sleeper", [sys.executable, "-c",
                                    "import time; print('hello', flush=True); time.sleep(60)"],
                        log)
    assert process.is_alive(rec)
    process.wait_until("hello in log", lambda: "hello" in log.read_text(), WaitPolicy(30, 0.05))
    assert process.terminate(rec)
    assert not process.is_alive(rec)
    assert not process.terminate(rec)  # second stop: nothing to do


def test_record_round_trips_and_rejects_recycled_pid(tmp_path: Path) -> None:
    rec = process.spawn("s", [sys.executable, "-c", "import time; time.sleep(60)"],
                        tmp_path / "s.log")
    try:
        again = process.ProcessRecord.from_json(rec.to_json())
        assert again == rec and process.is_alive(again)
        # Same pid, another start time: that is some other process, never ours to kill.
        other = process.ProcessRecord(rec.name, rec.pid, rec.start_ticks + 1, rec.argv0, rec.log)
        assert not process.is_alive(other)
        assert not process.terminate(other)
        assert process.is_alive(rec)
    finally:
        process.terminate(rec)


def test_wait_fails_fast_with_log_tail_when_component_dies(tmp_path: Path) -> None:
    code = "import sys; print('bad flag --frob', flush=True); sys.exit(3)"
    rec = process.spawn("crasher", [sys.executable, "-c", code], tmp_path / "x.log")
    with pytest.raises(ComponentError, match="crasher exited") as info:
        process.wait_until("readiness", lambda: False, WaitPolicy(60, 0.05), watch=[rec])
    assert "bad flag --frob" in str(info.value)


def test_wait_timeout_names_what_and_last_error() -> None:
    def check() -> bool:
        raise ConnectionRefusedError("nobody home")

    with pytest.raises(ComponentError, match=r"waiting for the thing.*nobody home"):
        process.wait_until("the thing", check, WaitPolicy(0.2, 0.05))


def test_run_error_carries_command_and_output() -> None:
    with pytest.raises(CommandError) as info:
        process.run([sys.executable, "-c", "import sys; print('oops'); sys.exit(4)"])
    msg = str(info.value)
    assert "exited 4" in msg and "oops" in msg and "-c" in msg


def test_run_missing_binary_is_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="exited 127"):
        process.run([str(tmp_path / "no-such-binary")])


def test_tail_of_missing_file_is_empty(tmp_path: Path) -> None:
    assert process.tail(tmp_path / "none.log") == ""
    f = tmp_path / "l.log"
    f.write_text("\n".join(str(i) for i in range(100)))
    assert process.tail(f, 3).splitlines() == ["97", "98", "99"]


FATAL = re.compile(r"failed to load plugin")


def test_wait_fails_fast_on_a_fatal_log_line_of_a_live_component(tmp_path: Path) -> None:
    # Alive for a minute, never ready: only the log line can end the wait before the timeout.
    code = ("import time; print('msg=\"failed to load plugin\" id=cri', flush=True); "
            "time.sleep(60)")
    rec = process.spawn("containerd/n0", [sys.executable, "-c", code], tmp_path / "c.log")
    try:
        with pytest.raises(ComponentError, match=r"containerd/n0 failed while waiting for "
                                                 r"CRI: .*failed to load plugin") as info:
            process.wait_until("CRI", lambda: False, WaitPolicy(300, 0.05), watch=[rec],
                               fatal=[FATAL])
        assert "timed out" not in str(info.value)
        assert process.is_alive(rec)
    finally:
        process.terminate(rec)


def test_fatal_lines_of_an_earlier_start_are_ignored(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    old = process.spawn("containerd/n0", [sys.executable, "-c",
                                          "print('failed to load plugin', flush=True)"], log)
    process.wait_until("old run gone", lambda: not process.is_alive(old), WaitPolicy(30, 0.05))
    assert "failed to load plugin" in log.read_text()
    code = "import time; print('serving', flush=True); time.sleep(60)"
    rec = process.spawn("containerd/n0", [sys.executable, "-c", code], log)
    try:
        process.wait_until("serving", lambda: "serving" in log.read_text(),
                           WaitPolicy(60, 0.05), watch=[rec], fatal=[FATAL])
        # Checked directly too: the wait above may have seen "serving" at its first poll.
        assert process.fatal_line(rec, [FATAL]) is None
        assert "serving" in process.current_run_log(rec)
    finally:
        process.terminate(rec)
