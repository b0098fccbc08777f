"""The binaries cache: version resolution, manifests, the order of sources, downloads, builds.

Unit tests use small shell scripts that print versions, standing in for the real binaries;
the integration tests at the end check the real cache when it has been filled.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cluster.artifacts import binaries, bincache, download, gobuild
from fakegpu.cluster.artifacts.bincache import Component, Probe
from fakegpu.errors import FakegpuError, InvalidInput, MissingPrerequisite


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own cache and no network, user dir or real go."""
    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKEGPU_DOWNLOAD_BASE", "off")
    monkeypatch.setenv("FAKEGPU_GITHUB_BASE", "off")
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)

    def no_go() -> gobuild.Go:
        raise MissingPrerequisite("test: building is not allowed here")

    monkeypatch.setattr(gobuild.Go, "find", staticmethod(no_go))


def fake_exe(path: Path, output: str, rc: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {rc}\n")
    path.chmod(0o755)
    return path


def fill_user_dir(where: Path, k8s: str, *, override: dict[str, str] | None = None) -> None:
    """Fake executables for every file of every component, each printing its version."""
    for recipe in binaries.recipes(k8s):
        comp = recipe.component
        for name in comp.files:
            text = (override or {}).get(name, f"{name} version v{comp.version}")
            fake_exe(where / name, text)


# --- versions --------------------------------------------------------------------------------

def test_default_is_the_newest_ga_minor() -> None:
    # A pre-release (1.38.0-beta.0) is opt-in: the default is the newest minor pinned to a GA patch.
    ga = [m for m, patch in binaries.SUPPORTED.items() if "-" not in patch]
    newest = max(ga, key=lambda m: tuple(int(x) for x in m.split(".")))
    assert newest == binaries.DEFAULT_MINOR
    assert binaries.resolve_version(None) == binaries.SUPPORTED[newest]


@pytest.mark.parametrize(("given", "want"), [
    ("1.34", "1.34.4"), ("v1.35", "1.35.4"), ("1.36.3", "1.36.3"), ("v1.37.2", "1.37.2"),
    (" 1.37 ", "1.37.2"), ("1.38", "1.38.0-beta.0"), ("v1.38.0-beta.0", "1.38.0-beta.0"),
])
def test_resolve_version_accepts_minor_or_pinned_patch(given: str, want: str) -> None:
    assert binaries.resolve_version(given) == want


@pytest.mark.parametrize("bad", ["1.33", "1.37.1", "1.39", "1.38.0", "latest", "", "1"])
def test_resolve_version_rejects_others_listing_the_supported(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        binaries.resolve_version(bad)
    for minor, patch in binaries.SUPPORTED.items():
        assert minor in str(err.value) and patch in str(err.value)


@pytest.mark.parametrize(("output", "version", "matches"), [
    ("Kubernetes v1.37.2", "1.37.2", True),
    ("etcd Version: 3.7.3\nGit SHA: x", "3.7.3", True),
    ("Kubernetes v1.37.20", "1.37.2", False),
    ("Kubernetes v11.37.2", "1.37.2", False),
    ("containerd v2.4.2 fakegpu", "2.4.2", True),
    ("v1.3702", "1.37.2", False),
])
def test_version_matches_whole_versions_only(output: str, version: str, matches: bool) -> None:
    assert bincache.version_matches(output, version) is matches


# --- the cache entry -------------------------------------------------------------------------

def _component() -> Component:
    return Component("fake", "1.2.3", {"one": Probe(), "two": Probe(("-v",))})


def _fill_good(bindir: Path) -> None:
    fake_exe(bindir / "one", "one v1.2.3")
    fake_exe(bindir / "two", "two version 1.2.3 (built here)")


def test_install_then_load_manifest() -> None:
    comp = _component()
    assert bincache.load_manifest(comp) is None
    bindir = bincache.install(comp, "test", _fill_good)
    manifest = bincache.load_manifest(comp)
    assert manifest is not None
    assert manifest["source"] == "test"
    assert manifest["files"]["one"]["reports"] == "one v1.2.3"
    data = (bindir / "two").read_bytes()
    assert manifest["files"]["two"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert not list(bincache.bin_root().glob(".tmp-*"))


def test_entry_without_manifest_is_ignored_and_replaced() -> None:
    comp = _component()
    half = bincache.entry_dir(comp) / "bin"
    _fill_good(half)  # as a crash after the copy, before the manifest, would leave it
    (half / "stale").write_text("left over")
    assert bincache.load_manifest(comp) is None
    bincache.install(comp, "test", _fill_good)
    assert bincache.load_manifest(comp) is not None
    assert not (half / "stale").exists()  # replaced, never merged


def test_entry_with_a_changed_file_is_ignored() -> None:
    comp = _component()
    bindir = bincache.install(comp, "test", _fill_good)
    with (bindir / "one").open("a") as f:
        f.write("# truncated or replaced\n")
    assert bincache.load_manifest(comp) is None


def test_entry_with_a_missing_file_or_other_version_is_ignored() -> None:
    comp = _component()
    bindir = bincache.install(comp, "test", _fill_good)
    other = Component("fake", "1.2.4", comp.probes)
    assert bincache.load_manifest(other) is None
    (bindir / "two").unlink()
    assert bincache.load_manifest(comp) is None


def test_install_refuses_a_binary_reporting_another_version() -> None:
    comp = _component()

    def fill(bindir: Path) -> None:
        _fill_good(bindir)
        fake_exe(bindir / "two", "two version 1.2.30")

    with pytest.raises(FakegpuError, match=r"two reports .*1\.2\.30.*not version 1\.2\.3"):
        bincache.install(comp, "test", fill)
    assert not bincache.entry_dir(comp).exists()
    assert not list(bincache.bin_root().glob(".tmp-*"))


def test_install_refuses_a_binary_that_fails() -> None:
    comp = _component()

    def fill(bindir: Path) -> None:
        _fill_good(bindir)
        fake_exe(bindir / "one", "one v1.2.3 but broken", rc=3)

    with pytest.raises(FakegpuError, match="exited 3"):
        bincache.install(comp, "test", fill)
    assert bincache.load_manifest(comp) is None


def test_install_refuses_a_missing_binary() -> None:
    comp = _component()
    with pytest.raises(FakegpuError, match="produced no two"):
        bincache.install(comp, "test", lambda d: fake_exe(d / "one", "v1.2.3"))
    assert not bincache.entry_dir(comp).exists()


def test_stale_tmp_entries_are_removed_under_the_lock() -> None:
    stale = bincache.bin_root() / ".tmp-fake-1.2.3-dead"
    stale.mkdir(parents=True)
    with bincache.lock():
        bincache.remove_stale_tmp()
    assert not stale.exists()


# --- ensure: sources in order ----------------------------------------------------------------

def test_ensure_copies_a_matching_user_dir_then_costs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    fill_user_dir(user, "1.36.3")
    bins = binaries.ensure("1.36", bin_dir=user)
    assert bins.k8s_version == "1.36.3"
    for name, path in bins.paths().items():
        assert path.exists(), name
        assert bincache.bin_root() in path.parents, name  # copied: the user dir may go away
    assert (bins.cni_bin_dir / "portmap").is_file()
    assert bins.kubelet.read_text() == (user / "kubelet").read_text()
    manifest = json.loads((bins.kubelet.parent.parent / "manifest.json").read_text())
    assert manifest["source"] == f"copied from {user.resolve()}"

    # Warm: nothing runs at all (no probe, no go), even with the user dir gone.
    def no_probe(*_: object) -> str:
        raise AssertionError("a warm cache must not run binaries")

    monkeypatch.setattr(bincache, "run_probe", no_probe)
    for f in user.iterdir():
        f.unlink()
    assert binaries.ensure("1.36.3") == bins
    assert binaries.is_cached("1.36") and not binaries.is_cached("1.37")


def test_concurrent_ensures_fill_each_entry_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    fill_user_dir(user, "1.37.2")
    installs: list[str] = []
    real_install = bincache.install
    gate = threading.Barrier(2)

    def counting_install(comp: Component, source: str, fill: Any) -> Path:
        installs.append(comp.key)
        return real_install(comp, source, fill)

    monkeypatch.setattr(bincache, "install", counting_install)
    results: list[binaries.Binaries] = []

    def run() -> None:
        gate.wait()  # both see an empty cache before either takes the lock
        results.append(binaries.ensure(bin_dir=user))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    assert sorted(installs) == sorted(r.component.key for r in binaries.recipes("1.37.2"))


def test_ensure_reads_the_user_dir_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    fill_user_dir(user, "1.37.2")
    monkeypatch.setenv(binaries.BIN_DIR_ENV, str(user))
    assert binaries.ensure().kubectl.read_text() == (user / "kubectl").read_text()


def test_ensure_rejects_a_user_dir_with_the_wrong_version(tmp_path: Path) -> None:
    user = tmp_path / "user"
    fill_user_dir(user, "1.37.2", override={"kubelet": "Kubernetes v1.36.3"})
    with pytest.raises(InvalidInput, match=r"kubelet reports .*v1\.36\.3.*not version 1\.37\.2"):
        binaries.ensure("1.37", bin_dir=user)
    assert not binaries.is_cached("1.37")
    assert not (bincache.bin_root() / "kubernetes-1.37.2").exists()


def test_ensure_rejects_a_user_dir_that_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not a directory"):
        binaries.ensure(bin_dir=tmp_path / "nope")
    user = tmp_path / "user"
    fill_user_dir(user, "1.37.2")
    binaries.ensure(bin_dir=user)
    with pytest.raises(InvalidInput, match="not a directory"):  # also with a warm cache
        binaries.ensure(bin_dir=tmp_path / "nope")


def test_partial_user_dir_seeds_what_it_has_and_builds_the_rest(tmp_path: Path) -> None:
    user = tmp_path / "user"
    kube = binaries.recipes("1.37.2")[0].component
    for name in kube.files:
        fake_exe(user / name, f"Kubernetes v{kube.version}")
    # Go is "missing" in these tests: the first component to build is what fails.
    with pytest.raises(MissingPrerequisite, match="building is not allowed"):
        binaries.ensure("1.37.2", bin_dir=user)
    assert bincache.load_manifest(kube) is not None
    assert not binaries.is_cached("1.37.2")


# --- downloads -------------------------------------------------------------------------------

class _Files(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_HEAD(self) -> None:
        self.send_response(200 if self.path in self.files or self.path == "/" else 404)
        self.end_headers()

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def http_files() -> Iterator[tuple[str, dict[str, bytes]]]:
    files: dict[str, bytes] = {}
    handler = type("Handler", (_Files,), {"files": files})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()
        download._reachable.clear()


def _script(text: str) -> bytes:
    return f"#!/bin/sh\necho '{text}'\n".encode()


def test_ensure_downloads_kubernetes_with_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_files: tuple[str, dict[str, bytes]]
) -> None:
    base, files = http_files
    arch = binaries._arch()
    for name in binaries.K8S_PROGRAMS:
        body = _script("Kubernetes v1.35.4")
        path = f"/release/v1.35.4/bin/linux/{arch}/{name}"
        files[path] = body
        files[path + ".sha256"] = hashlib.sha256(body).hexdigest().encode() + b"\n"
    monkeypatch.setenv("FAKEGPU_DOWNLOAD_BASE", base)
    user = tmp_path / "user"  # everything but Kubernetes comes from here
    fill_user_dir(user, "1.35.4")
    for name in binaries.K8S_PROGRAMS:
        (user / name).unlink()
    bins = binaries.ensure("1.35", bin_dir=user)
    assert bins.kube_scheduler.read_bytes() == files[
        f"/release/v1.35.4/bin/linux/{arch}/kube-scheduler"]
    manifest = json.loads((bins.kubelet.parent.parent / "manifest.json").read_text())
    assert manifest["source"] == f"downloaded from {base}"


def test_download_refuses_a_checksum_mismatch(
    tmp_path: Path, http_files: tuple[str, dict[str, bytes]]
) -> None:
    base, files = http_files
    files["/x/tool"] = _script("tool v1")
    files["/x/tool.sha256"] = b"0" * 64
    asset = download.Asset(url=f"{base}/x/tool", sha256_url=f"{base}/x/tool.sha256", name="tool")
    (tmp_path / "bin").mkdir()
    with pytest.raises(download.ChecksumMismatch):
        download.download(asset, tmp_path / "bin", tmp_path)
    assert not (tmp_path / "bin" / "tool").exists()


def test_download_extracts_members_of_a_tarball_checked_by_a_sums_file(
    tmp_path: Path, http_files: tuple[str, dict[str, bytes]]
) -> None:
    base, files = http_files
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in (("pkg/bin/a", _script("a v1")), ("pkg/README", b"hi")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    files["/r/pkg.tar.gz"] = buf.getvalue()
    files["/r/SUMS"] = (f"{'1' * 64}  other.tar.gz\n"
                        f"{hashlib.sha256(buf.getvalue()).hexdigest()} *pkg.tar.gz\n").encode()
    asset = download.Asset(url=f"{base}/r/pkg.tar.gz", sha256_url=f"{base}/r/SUMS",
                           members={"pkg/bin/a": "tool-a"})
    (tmp_path / "bin").mkdir()
    download.download(asset, tmp_path / "bin", tmp_path)
    assert (tmp_path / "bin" / "tool-a").read_bytes() == _script("a v1")
    assert os.access(tmp_path / "bin" / "tool-a", os.X_OK)


def test_an_unreachable_base_is_detected() -> None:
    download._reachable.clear()
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    assert download.reachable("http://127.0.0.1:1") is False


# --- the Go wrapper module -------------------------------------------------------------------

GOMOD = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tk8s.io/api v0.0.0
\tgithub.com/x/y v1.2.3
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet
\tgithub.com/x/y => github.com/x/y v1.2.4
)

replace go.etcd.io/etcd/api/v3 v3.7.3 => ../api
"""


def test_parse_gomod_finds_go_godebug_and_local_replaces() -> None:
    mod = gobuild.parse_gomod(GOMOD)
    assert mod.go == "1.26.0"
    assert mod.godebug == ("default=go1.26",)
    assert mod.local_replaces == ("k8s.io/api", "k8s.io/kubelet", "go.etcd.io/etcd/api/v3")


def test_wrapper_replaces_local_modules_with_released_versions(tmp_path: Path) -> None:
    spec = gobuild.WrapperBuild(
        what="k", module="k8s.io/kubernetes", version="v1.37.2",
        programs=(gobuild.GoProgram("k8s.io/kubernetes/cmd/kubelet", "kubelet"),),
    )
    mod = gobuild.parse_gomod(GOMOD)
    gobuild.write_wrapper(tmp_path, spec, mod, {m: "v0.37.2" for m in mod.local_replaces})
    text = (tmp_path / "go.mod").read_text()
    assert "require k8s.io/kubernetes v1.37.2" in text
    assert "replace k8s.io/kubelet => k8s.io/kubelet v0.37.2" in text
    assert "godebug default=go1.26" in text and "go 1.26.0" in text
    assert '_ "k8s.io/kubernetes/cmd/kubelet"' in (tmp_path / "tools.go").read_text()


def test_a_beta_builds_with_the_beta_staging_modules_and_its_stand_ins(tmp_path: Path) -> None:
    spec = binaries._kubernetes("1.38.0-beta.0").build()
    assert spec.version == "v1.38.0-beta.0"
    assert spec.replace_local_with == "v0.38.0-beta.0"
    assert "-X k8s.io/component-base/version.gitMinor=38" in spec.ldflags
    assert "-X k8s.io/component-base/version.gitVersion=v1.38.0-beta.0" in spec.ldflags
    assert set(spec.stand_ins) == {"sigs.k8s.io/iptables-wrappers"}
    assert binaries._kubernetes("1.37.2").build().stand_ins == {}
    mod = gobuild.parse_gomod("module k8s.io/kubernetes\n\ngo 1.27.0\n")
    gobuild.write_wrapper(tmp_path, spec, mod, {})
    text = (tmp_path / "go.mod").read_text()
    assert ("replace sigs.k8s.io/iptables-wrappers => ./standins/iptables-wrappers"
            in text.splitlines())
    copied = tmp_path / "standins" / "iptables-wrappers"
    assert (copied / "go.mod").read_text().count("module sigs.k8s.io/iptables-wrappers") == 1
    assert (copied / "pkg" / "iptables" / "iptables.go").is_file()


@pytest.mark.parametrize(("needed", "have", "toolchain"), [
    ("1.26.0", "go1.26.8", "local"),
    ("1.27.0", "go1.26.8", gobuild.NEWER_TOOLCHAIN),
    ("1.27.0", "go1.27.3", "local"),
])
def test_a_newer_go_is_taken_only_when_the_module_needs_it(needed: str, have: str,
                                                           toolchain: str) -> None:
    assert gobuild.toolchain_for(needed, have, Path("/usr/bin/go"), "k") == toolchain


def test_a_go_newer_than_the_allowed_toolchain_is_a_missing_prerequisite() -> None:
    with pytest.raises(MissingPrerequisite, match=r"needs Go 1\.28\.0 or newer, found go1\.26"):
        gobuild.toolchain_for("1.28.0", "go1.26.8", Path("/usr/bin/go"), "k")


def test_wrapper_keeps_go_sum_only_while_unchanged(tmp_path: Path) -> None:
    spec = gobuild.WrapperBuild(what="m", module="example.com/m", version="v1.0.0",
                                programs=(gobuild.GoProgram("example.com/m", "m"),))
    mod = gobuild.parse_gomod("module m\n\ngo 1.22\n")
    gobuild.write_wrapper(tmp_path, spec, mod, {})
    (tmp_path / "go.sum").write_text("tidy's work\n")
    gobuild.write_wrapper(tmp_path, spec, mod, {})
    assert (tmp_path / "go.sum").exists()
    gobuild.write_wrapper(tmp_path, spec, mod, {"example.com/n": "v2.0.0"})
    assert not (tmp_path / "go.sum").exists()


@pytest.mark.parametrize(("package", "name"), [
    ("go.etcd.io/etcd/server/v3", "server"),
    ("k8s.io/kubernetes/cmd/kubelet", "kubelet"),
    ("github.com/opencontainers/runc", "runc"),
])
def test_default_binary_name(package: str, name: str) -> None:
    assert gobuild.default_binary_name(package) == name


def test_version_tuple() -> None:
    assert gobuild.version_tuple("go1.26.8") > gobuild.version_tuple("1.26.0")
    assert gobuild.version_tuple("go1.25.9") < gobuild.version_tuple("1.26")


def test_a_failed_command_raises_one_line_with_command_tail_and_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    cmd = ["sh", "-c", "echo compiling >&2; echo 'x.go:3: undefined: Foo' >&2; exit 2"]
    with pytest.raises(gobuild.BuildError) as err:
        gobuild.run_logged(cmd, what="building x", log=log, env=dict(os.environ), cwd=tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert "building x failed" in message and "sh -c" in message
    assert "undefined: Foo" in message and str(log) in message
    assert err.value.tail == ["compiling", "x.go:3: undefined: Foo"]
    assert "undefined: Foo" in log.read_text() and "# exit status 2" in log.read_text()


def test_go_env_pins_toolchain_and_module_mode() -> None:
    env = gobuild.Go(Path("/usr/bin/false")).env(cgo=True)
    assert env["GOTOOLCHAIN"] == "local"
    assert "-mod=mod" in env["GOFLAGS"].split()
    assert env["CGO_ENABLED"] == "1"


# --- the real cache (filled by `fakegpu cluster binaries`) -----------------------------------

@pytest.mark.integration
def test_cached_real_binaries_report_their_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real cache, not this module's temporary one
    bins = binaries.cached()
    if bins is None:
        pytest.skip("SKIPPED: the real binaries are not cached; run `fakegpu cluster binaries`")
    for recipe in binaries.recipes(bins.k8s_version):
        bincache.check_versions(recipe.component, bincache.entry_dir(recipe.component) / "bin")


# --- the CLI command -------------------------------------------------------------------------

def _cli_binaries_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      *extra: str) -> tuple[Path, dict[str, str]]:
    """``fakegpu cluster binaries`` for 1.34 from a user dir of fakes (plus ``extra`` fakes
    named by file), -o json; (the user dir, what it printed)."""
    import argparse

    from fakegpu.cluster.artifacts import cli_binaries, kwok

    parser = argparse.ArgumentParser()
    cli_binaries.add_commands(parser.add_subparsers())
    user = tmp_path / "user"
    fill_user_dir(user, "1.34.4")
    flags = []
    if "kwok" in extra:
        fake_exe(user / "kwok", f"kwok version v{kwok.KWOK_VERSION} go1.26.8 (linux/amd64)")
        flags.append("--kwok")
    args = parser.parse_args(["binaries", "--k8s-version", "1.34", "--bin-dir", str(user),
                              "--no-images", *flags, "--json"])
    assert args.func(args) == 0
    return user, json.loads(capsys.readouterr().out)


def test_cli_binaries_prints_the_cached_paths_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user, shown = _cli_binaries_json(tmp_path, capsys)
    assert shown["k8s_version"] == "1.34.4"
    assert shown["kubelet"] == str(binaries.ensure("1.34").kubelet)
    assert Path(shown["crictl"]).read_text() == (user / "crictl").read_text()
    assert "kwok" not in shown  # only fleet topologies need it: asked for with --kwok


def test_cli_binaries_kwok_adds_kwok_from_the_same_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fakegpu.cluster.artifacts import kwok

    user, shown = _cli_binaries_json(tmp_path, capsys, "kwok")
    assert shown["kwok"] == str(kwok.cached())
    assert Path(shown["kwok"]).read_text() == (user / "kwok").read_text()
