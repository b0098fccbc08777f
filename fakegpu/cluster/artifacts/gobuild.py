"""Build Go programs from the Go module proxy through a throwaway "wrapper" module.

Why a wrapper: ``go install pkg@version`` refuses modules whose go.mod has ``replace``
directives (Kubernetes replaces its staging modules with ``./staging/...``, etcd its
sibling modules with ``../api``). A small module of our own that *requires* the upstream
module, replaces each locally-replaced module with a real version, and imports the main
packages from a ``tools`` file builds every binary in one ``go build`` invocation, so the
packages they share are compiled once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.errors import FakegpuError, MissingPrerequisite

# Lines of output kept in a BuildError (the whole output is in the log file).
_TAIL_LINES = 25

# The one newer Go toolchain a build may take, from the module proxy like any module, and only
# for an upstream whose go.mod needs more than the host's Go (Kubernetes 1.38 needs Go 1.27).
# Every other build runs the host's Go (GOTOOLCHAIN=local), so no toolchain is ever fetched
# behind the user's back for a module that does not need it.
NEWER_TOOLCHAIN = "go1.27.3"

# Where a wrapper keeps its copies of stand-in modules (relative `replace` targets).
_STANDINS = "standins"


class BuildError(FakegpuError):
    """A build command failed. The message is one line; ``tail`` holds the last output lines."""

    def __init__(self, what: str, cmd: Sequence[str], log: Path, tail: list[str]) -> None:
        last = next((line for line in reversed(tail) if line.strip()), "(no output)")
        super().__init__(
            f"{what} failed: `{_short_cmd(cmd)}`: {last.strip()} (full log: {log})"
        )
        self.cmd = list(cmd)
        self.log = log
        self.tail = tail
        # Shown by tracebacks (-v) and by pytest: the context a single line cannot carry.
        self.add_note("last lines of output:\n" + "\n".join(tail))


def _short_cmd(cmd: Sequence[str]) -> str:
    # -ldflags strings are long and say nothing about why a build failed.
    shown = []
    skip = False
    for arg in cmd:
        if skip:
            shown.append("...")
            skip = False
            continue
        shown.append(arg)
        skip = arg == "-ldflags"
    return " ".join(shown)


@dataclass(frozen=True)
class GoModule:
    """The parts of a go.mod file a wrapper module needs from the module it wraps."""

    go: str  # the `go` directive, e.g. "1.26.0"
    godebug: tuple[str, ...]  # `godebug` lines, verbatim ("default=go1.26")
    local_replaces: tuple[str, ...]  # module paths replaced by a ./ or ../ directory


_GO_RE = re.compile(r"^go\s+(\S+)\s*$", re.M)
_GODEBUG_RE = re.compile(r"^godebug\s+(\S.*?)\s*$", re.M)
# Matches the left side of a replace whose right side is a directory, both in a
# `replace ( ... )` block and in a one-line `replace a => ./b`.
_LOCAL_REPLACE_RE = re.compile(
    r"^[ \t]*(?:replace[ \t]+)?([^\s(]\S*)(?:[ \t]+\S+)?[ \t]*=>[ \t]*\.{1,2}/\S*[ \t]*$", re.M
)


def parse_gomod(text: str) -> GoModule:
    """Read the go directive, godebug lines and local-directory replaces of a go.mod text."""
    go = _GO_RE.search(text)
    if go is None:
        raise FakegpuError("go.mod has no `go` directive")
    return GoModule(
        go=go.group(1),
        godebug=tuple(_GODEBUG_RE.findall(text)),
        local_replaces=tuple(_LOCAL_REPLACE_RE.findall(text)),
    )


def version_tuple(version: str) -> tuple[int, ...]:
    """"go1.26.8" / "v1.26" / "1.26.0" -> (1, 26, 8); pre-release suffixes are ignored."""
    nums = re.match(r"^(?:go|v)?(\d+(?:\.\d+)*)", version.strip())
    if nums is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(n) for n in nums.group(1).split("."))


@dataclass(frozen=True)
class GoProgram:
    """One main package and the file name its binary gets."""

    package: str
    name: str


@dataclass(frozen=True)
class WrapperBuild:
    """Everything needed to build some main packages of one upstream module."""

    what: str  # for messages: "kubernetes 1.37.2"
    module: str  # "k8s.io/kubernetes"
    version: str  # "v1.37.2"
    programs: tuple[GoProgram, ...]
    # The version given to every module the upstream go.mod replaces by a directory
    # (Kubernetes: its staging modules, published as v0.<minor>.<patch>).
    replace_local_with: str | None = None
    ldflags: tuple[str, ...] = ()  # beyond -s -w
    tags: tuple[str, ...] = ()
    cgo: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # Module path -> a directory of fakegpu's own stand-in for it (standins/), for a module
    # the Go proxy does not serve; copied into the wrapper and replaced by its copy there.
    stand_ins: Mapping[str, Path] = field(default_factory=dict)


class Go:
    """The host's go command, run with an environment that makes builds reproducible here."""

    def __init__(self, executable: Path) -> None:
        self.executable = executable

    @classmethod
    def find(cls) -> Go:
        found = shutil.which("go") or next(
            (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.access(p, os.X_OK)),
            None,
        )
        if found is None:
            raise MissingPrerequisite(
                "building the cluster binaries needs Go (https://go.dev/dl, 1.26 or newer); "
                "or name a directory of prebuilt binaries with FAKEGPU_BIN_DIR"
            )
        return cls(Path(found))

    def env(self, *, cgo: bool = False, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        # -mod=mod: the wrapper's go.mod/go.sum are ours to update. -buildvcs=false: the
        # wrapper is not a repository, and build output must not depend on where it sits.
        env["GOFLAGS"] = "-mod=mod -buildvcs=false"
        # Never download another toolchain behind the user's back: fail with a clear message.
        env["GOTOOLCHAIN"] = "local"
        env["CGO_ENABLED"] = "1" if cgo else "0"
        env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
        env.update(extra or {})
        return env

    def version(self) -> str:
        out = subprocess.run(
            [str(self.executable), "env", "GOVERSION"],
            capture_output=True, text=True, env=self.env(), check=False,
        )
        if out.returncode != 0 or not out.stdout.strip():
            raise MissingPrerequisite(
                f"`{self.executable} env GOVERSION` failed: {out.stderr.strip()}"
            )
        return out.stdout.strip()

    def module_gomod(self, module: str, version: str, log: Path) -> str:
        """The go.mod text of ``module@version``, fetched through the module proxy."""
        # `go list -m` fetches only the .info and .mod files: unlike `go mod download` it
        # works for a module whose go.mod needs a newer Go than this one.
        cmd = [str(self.executable), "list", "-m", "-json", f"{module}@{version}"]
        # Run outside any module (the wrapper's parent) and without -mod, which only
        # applies inside one.
        env = self.env()
        env["GOFLAGS"] = "-buildvcs=false"
        out = run_logged(cmd, what=f"fetching {module}@{version}", log=log,
                         env=env, cwd=log.parent.parent)
        info = json.loads(out)
        gomod = info.get("GoMod")
        if not gomod:
            raise FakegpuError(f"the module proxy gave no go.mod for {module}@{version} ({log})")
        return Path(gomod).read_text()

    def build(
        self,
        spec: WrapperBuild,
        workdir: Path,
        outdir: Path,
        *,
        on_package: Callable[[str], None] | None = None,
    ) -> None:
        """Build ``spec``'s programs into ``outdir``; ``workdir`` holds the wrapper and log."""
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "build.log"
        log.write_text("")
        upstream = parse_gomod(self.module_gomod(spec.module, spec.version, log))
        toolchain = toolchain_for(upstream.go, self.version(), self.executable, spec.what)
        replaces = {m: spec.replace_local_with for m in upstream.local_replaces
                    if spec.replace_local_with}
        if upstream.local_replaces and not replaces:
            raise FakegpuError(
                f"{spec.module} {spec.version} replaces {', '.join(upstream.local_replaces)} "
                "by directories; the build needs replace_local_with"
            )
        write_wrapper(workdir, spec, upstream, replaces)
        env = self.env(cgo=spec.cgo, extra={**spec.extra_env, "GOTOOLCHAIN": toolchain})
        if toolchain != "local":
            with log.open("a") as logf:
                logf.write(f"# {spec.module} needs Go {upstream.go}: GOTOOLCHAIN={toolchain}\n")
        run_logged([str(self.executable), "mod", "tidy"], what=f"resolving {spec.what}",
                   log=log, env=env, cwd=workdir)
        cmd = [str(self.executable), "build", "-v", "-trimpath",
               "-ldflags", " ".join(("-s", "-w", *spec.ldflags))]
        if spec.tags:
            cmd += ["-tags", ",".join(spec.tags)]
        cmd += ["-o", str(outdir) + os.sep, *(p.package for p in spec.programs)]
        run_logged(cmd, what=f"building {spec.what}", log=log, env=env, cwd=workdir,
                   on_line=on_package)
        for prog in spec.programs:
            built = outdir / default_binary_name(prog.package)
            if built.name != prog.name:
                built.rename(outdir / prog.name)


def toolchain_for(needed: str, have: str, executable: Path, what: str) -> str:
    """The GOTOOLCHAIN value that builds a module needing Go ``needed`` with Go ``have``.

    "local" when the host's Go is new enough, NEWER_TOOLCHAIN when that one is; otherwise a
    MissingPrerequisite naming both versions.
    """
    if version_tuple(have) >= version_tuple(needed):
        return "local"
    if version_tuple(NEWER_TOOLCHAIN) >= version_tuple(needed):
        return NEWER_TOOLCHAIN
    raise MissingPrerequisite(
        f"{what} needs Go {needed} or newer, found {have} ({executable})"
    )


def write_wrapper(
    workdir: Path, spec: WrapperBuild, upstream: GoModule, replaces: Mapping[str, str]
) -> None:
    """Write go.mod and tools.go of the wrapper module (go.sum is left to `go mod tidy`)."""
    lines = ["module fakegpu.local/build", "", f"go {upstream.go}", ""]
    lines += [f"godebug {g}" for g in upstream.godebug]
    lines += ["", f"require {spec.module} {spec.version}", ""]
    # A module the upstream replaces by a directory cannot be resolved from a dependency:
    # point it at the released version named by the caller.
    lines += [f"replace {mod} => {mod} {ver}" for mod, ver in sorted(replaces.items())]
    lines += [f"replace {mod} => ./{_STANDINS}/{src.name}"
              for mod, src in sorted(spec.stand_ins.items())]
    text = "\n".join(lines) + "\n"
    shutil.rmtree(workdir / _STANDINS, ignore_errors=True)
    for src in spec.stand_ins.values():
        shutil.copytree(src, workdir / _STANDINS / src.name)
    # `go mod tidy` rewrites go.mod, so remember what we asked for in a side file: when it
    # is unchanged, keep go.mod and go.sum as tidy left them and a retry is quick.
    stamp = workdir / "wrapper.in"
    if not stamp.exists() or stamp.read_text() != text:
        (workdir / "go.mod").write_text(text)
        (workdir / "go.sum").unlink(missing_ok=True)
        stamp.write_text(text)
    imports = "\n".join(f'\t_ "{p.package}"' for p in spec.programs)
    (workdir / "tools.go").write_text(
        "//go:build tools\n\n// Generated by fakegpu: the programs it builds.\n"
        f"package tools\n\nimport (\n{imports}\n)\n"
    )


def default_binary_name(package: str) -> str:
    """The file name `go build -o DIR/` gives a main package (a /vN suffix is skipped)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


def run_logged(
    cmd: Sequence[str],
    *,
    what: str,
    log: Path,
    env: Mapping[str, str],
    cwd: Path,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """Run ``cmd``; stdout is returned, stderr lines are appended to ``log`` (and to on_line).

    On failure raise BuildError with the command and the tail of its output.
    """
    with log.open("a") as logf, tempfile.TemporaryFile("w+") as outf:
        logf.write(f"$ {' '.join(cmd)}\n")
        logf.flush()
        # stdout goes to a file so a chatty stdout can never block us reading stderr.
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env), text=True,
            stdout=outf, stderr=subprocess.PIPE, errors="replace",
        )
        assert proc.stderr is not None
        tail: list[str] = []
        for line in proc.stderr:  # go writes progress and errors to stderr
            logf.write(line)
            tail = [*tail[-(_TAIL_LINES - 1):], line.rstrip("\n")]
            if on_line is not None:
                on_line(line.rstrip("\n"))
        rc = proc.wait()
        outf.seek(0)
        stdout = outf.read()
        logf.write(stdout if len(stdout) < 4000 else stdout[:4000] + "\n...\n")
        logf.write(f"# exit status {rc}\n")
    if rc != 0:
        tail = tail or stdout.splitlines()[-_TAIL_LINES:]
        raise BuildError(what, cmd, log, tail)
    return stdout
