"""Image archives: valid OCI layout, reproducible, and usable by a real containerd."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu import wait as waiting
from fakegpu.cluster.artifacts import binaries, images, oci


def read_archive(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        out = {}
        for member in tar.getmembers():
            assert member.mtime == 0 and member.uid == 0 and member.gid == 0, member.name
            f = tar.extractfile(member)
            if f is not None:
                out[member.name] = f.read()
        return out


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files["blobs/" + digest.replace(":", "/")]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest  # content-addressed
    return data


def check_oci(data: bytes, ref: str) -> tuple[dict[str, Any], list[tarfile.TarInfo]]:
    """Walk an archive as an importer does, checking every digest and size on the way."""
    files = read_archive(data)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    [desc] = index["manifests"]
    assert desc["annotations"][oci.ANNOTATION_IMAGE_NAME] == ref
    assert desc["mediaType"] == oci.MEDIA_MANIFEST
    manifest_bytes = blob(files, desc["digest"])
    assert len(manifest_bytes) == desc["size"]
    manifest = json.loads(manifest_bytes)
    config_bytes = blob(files, manifest["config"]["digest"])
    assert len(config_bytes) == manifest["config"]["size"]
    config = json.loads(config_bytes)
    assert config["os"] == "linux" and desc["platform"]["architecture"] == config["architecture"]
    members: list[tarfile.TarInfo] = []
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        assert layer["mediaType"] == oci.MEDIA_LAYER_GZIP
        gz = blob(files, layer["digest"])
        assert len(gz) == layer["size"]
        raw = gzip.decompress(gz)
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == diff_id
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            members += tar.getmembers()
    # The Docker manifest points at the same blobs (for `docker load`).
    [docker] = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == [ref]
    assert docker["Config"] == "blobs/" + manifest["config"]["digest"].replace(":", "/")
    for path in docker["Layers"]:
        assert path in files
    return config, members


def test_layer_tar_adds_parents_sorts_and_normalizes() -> None:
    raw = oci.layer_tar([oci.file("usr/bin/tool", b"x", 0o755), oci.symlink("bin/sh", "busybox")])
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["bin", "bin/sh", "usr", "usr/bin", "usr/bin/tool"]
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 and not m.uname for m in members)
    tool = members[-1]
    assert tool.isreg() and tool.mode == 0o755
    assert members[1].issym() and members[1].linkname == "busybox"


def test_archive_is_valid_oci_and_reproducible() -> None:
    layer = oci.layer_tar([oci.file("hello", b"world", 0o755)])
    config = oci.ImageConfig(entrypoint=("/hello",))
    first = oci.build_archive("example.test/a:1", [layer], config, arch="amd64")
    again = oci.build_archive("example.test/a:1", [layer], config, arch="amd64")
    assert first == again
    cfg, members = check_oci(first, "example.test/a:1")
    assert cfg["config"]["Entrypoint"] == ["/hello"]
    assert [m.name for m in members] == ["hello"]
    # Not vacuous: any input change changes the bytes.
    other = oci.build_archive("example.test/a:1", [oci.layer_tar([oci.file("hello", b"World")])],
                              config, arch="amd64")
    assert other != first


def test_pause_and_workload_archives_from_given_inputs() -> None:
    pause = images.pause_archive_bytes(b"\x7fELF fake pause", "amd64")
    assert pause == images.pause_archive_bytes(b"\x7fELF fake pause", "amd64")
    cfg, members = check_oci(pause, images.PAUSE_IMAGE)
    assert cfg["config"]["Entrypoint"] == ["/pause"]
    assert [(m.name, m.mode) for m in members] == [("pause", 0o755)]

    ref = images.workload_ref()
    work = images.workload_archive_bytes(b"fake busybox", ["cat", "env", "ls", "sh", "sleep"],
                                         "amd64", ref)
    cfg, members = check_oci(work, ref)
    links = {m.name: m.linkname for m in members if m.issym()}
    for applet in ("sh", "sleep", "env", "cat", "ls"):
        assert links[f"bin/{applet}"] == "busybox"
    assert {m.name: m.mode for m in members}["tmp"] == 0o1777
    assert not ref.endswith(":latest")


def test_ensure_images_builds_once_and_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("SKIPPED: gcc is not installed (needed to build the pause image)")
    real = images.images_dir()
    debs = sorted((real / "debs").glob("busybox-static_*.deb"))
    if not debs and shutil.which("apt-get") is None:
        pytest.skip("SKIPPED: no busybox-static .deb cached and no apt-get to fetch one")
    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    if debs:  # reuse the real cache's package: no apt-get in a unit test when avoidable
        monkeypatch.setenv(images.BUSYBOX_ENV, str(debs[-1]))
    first = images.ensure_images()
    mtimes = [p.stat().st_mtime_ns for p in first.archives]
    second = images.ensure_images()
    assert second == first
    assert [p.stat().st_mtime_ns for p in second.archives] == mtimes  # reused, not rebuilt
    check_oci(first.pause_archive.read_bytes(), images.PAUSE_IMAGE)
    _, members = check_oci(first.workload_archive.read_bytes(), first.workload_ref)
    names = {m.name for m in members}
    assert {"bin/busybox", "bin/sh", "bin/sleep", "bin/env", "bin/cat", "bin/ls"} <= names
    assert "usr/bin/nvbandwidth" in names  # the bandwidth job's program (issue 12)
    assert "usr/bin/podresources" in names  # the kubelet PodResources client (issue 24)


# --- integration: the real pause program and a real containerd -------------------------------

@pytest.fixture(scope="module")
def pause_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("SKIPPED: gcc is not installed")
    out = tmp_path_factory.mktemp("pause") / "pause"
    images.compile_pause(out)
    return out


def wait_for(condition: Any, what: str, timeout: float = 30.0) -> None:
    waiting.wait_for(waiting.until_true(condition), what=what, timeout=timeout, interval=0.05)


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_pause_exits_cleanly_on_a_stop_signal(pause_binary: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen([str(pause_binary)], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: _state(proc.pid) == "S", "pause to sleep")
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert f"signal {int(sig)}" in (proc.stderr.read() if proc.stderr else "")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_pause_outlives_other_wakeups(pause_binary: Path) -> None:
    proc = subprocess.Popen([str(pause_binary)], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: _state(proc.pid) == "S", "pause to sleep")
        proc.send_signal(signal.SIGCHLD)  # wakes it (a child may have exited): no exit
        proc.send_signal(signal.SIGCHLD)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        # It names the signal that ended it: SIGTERM, not one of the wakeups.
        assert (proc.stderr.read() if proc.stderr else "").strip().endswith(
            f"signal {int(signal.SIGTERM)}, exiting")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_pause_as_pid1_reaps_orphans(pause_binary: Path) -> None:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("SKIPPED: needs root and unshare(1) for a PID namespace")
    # In a new PID namespace sh starts an orphan (sleep, whose parent exits) and execs pause
    # as PID 1: the orphan is re-parented to pause, which must reap it when it exits.
    script = f"(sleep 0.3 &) ; exec {pause_binary}"
    proc = subprocess.Popen([unshare, "--pid", "--fork", "sh", "-c", script],
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _children(proc.pid), "unshare's child")
        [pause_pid] = _children(proc.pid)
        wait_for(lambda: _comm(pause_pid) == "pause", "pause to be exec'd")
        # The orphan came and went: with reaping, no child of pause is left, zombie or not.
        wait_for(lambda: not _children(pause_pid), "pause to reap the orphan")
        os.kill(pause_pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[tuple[binaries.Binaries, Path]]:
    """A throwaway containerd with its own root, state and socket (as root)."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED: running containerd needs root")
    bins = binaries.cached()
    if bins is None:
        pytest.skip("SKIPPED: the real binaries are not cached; run `fakegpu cluster binaries`")
    # Unix socket paths are limited to 107 bytes: keep the socket out of the deep tmp_path.
    sockdir = Path(tempfile.mkdtemp(prefix="fg-ctrd-", dir="/tmp"))
    sock = sockdir / "c.sock"
    config = tmp_path / "config.toml"
    config.write_text(
        "version = 3\n"
        f'root = "{tmp_path / "root"}"\n'
        f'state = "{sockdir / "state"}"\n'
        # Only what an import needs: the CRI would look for CNI config and more.
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",'
        ' "io.containerd.cri.v1.images"]\n'
        f'[grpc]\n  address = "{sock}"\n'
        f'[ttrpc]\n  address = "{sock}.ttrpc"\n'
    )
    env = dict(os.environ)
    env["PATH"] = f"{bins.containerd.parent}:{bins.runc.parent}:{env.get('PATH', '')}"
    log = (tmp_path / "containerd.log").open("w")
    proc = subprocess.Popen([str(bins.containerd), "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"containerd exited: {(tmp_path / 'containerd.log').read_text()[-2000:]}")
            return subprocess.run([str(bins.ctr), "--address", str(sock), "version"],
                                  capture_output=True, check=False).returncode == 0
        wait_for(ready, "containerd to serve")
        yield bins, sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        # Unpacked layers are overlay mounts only while containers run; none remain here.
        shutil.rmtree(sockdir, ignore_errors=True)


@pytest.mark.integration
def test_import_images_into_a_real_containerd(
    containerd: tuple[binaries.Binaries, Path], tmp_path: Path
) -> None:
    bins, sock = containerd
    imgs = images.ensure_images()
    images.import_images(bins, sock, imgs.archives)
    listed = subprocess.run(
        [str(bins.ctr), "--address", str(sock), "-n", images.CRI_NAMESPACE, "images", "ls", "-q"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert imgs.pause_ref in listed and imgs.workload_ref in listed
    # Usable, not just listed: run the workload image's shell with the real runc. Its output
    # goes to a file on a bind mount: ctr's own stdout copy can lose the tail when the task
    # exits at once on a loaded host (a CI run here got the first two lines and no `env`).
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = subprocess.run(
        [str(bins.ctr), "--address", str(sock), "-n", images.CRI_NAMESPACE, "run", "--rm",
         "--mount", f"type=bind,src={out_dir},dst=/out,options=rbind:rw",
         imgs.workload_ref, f"fg-test-{os.getpid()}", "sh", "-c",
         "{ echo hello from $(cat /etc/passwd | head -n1 | cut -d: -f1); ls /bin/sleep; env; }"
         " > /out/result"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    result = (out_dir / "result").read_text()
    assert "hello from root" in result and "/bin/sleep" in result
    assert "PATH=/usr/local/sbin" in result
