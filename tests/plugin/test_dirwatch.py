"""kubeletplugin.dirwatch: a file replaced by rename in a watched directory wakes the callback."""

from __future__ import annotations

import threading
from pathlib import Path

from fakegpu import fsutil
from fakegpu.kubeletplugin.dirwatch import DirWatch


def test_a_file_replaced_in_a_watched_directory_calls_back(tmp_path: Path) -> None:
    woke = threading.Event()
    watch = DirWatch([tmp_path], woke.set)
    assert watch.start()
    try:
        assert not woke.wait(0.2)  # nothing changed yet
        fsutil.atomic_write(tmp_path / "carrier", "0\n")
        assert woke.wait(10.0)
    finally:
        watch.stop()
    woke.clear()
    fsutil.atomic_write(tmp_path / "carrier", "1\n")
    assert not woke.wait(0.3)  # stopped: no more calls


def test_nothing_to_watch_starts_nothing(tmp_path: Path) -> None:
    assert not DirWatch([], lambda: None).start()
    assert not DirWatch([tmp_path / "missing"], lambda: None).start()
