"""``fakegpu conformance``: the DRA driver conformance suite against any cluster.

pytest runs the suite, as a tool of its own: with the package's ini, rootdir and confcutdir,
no plugin but fakegpu's (and pytest-timeout), and none of the caller's PYTEST_* settings, so
the repository it is run from (its ini's addopts, its conftest files) cannot change the run.
This command checks its inputs first (one line, exit 2), asks the server for its version (not
reached or not Kubernetes: one line, exit 3), and maps pytest's exit codes to fakegpu's
(docs/conformance.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from fakegpu.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    InvalidInput,
    MissingPrerequisite,
    printable,
)

from . import add_verbose, options

# pytest's exit codes (pytest.ExitCode, not imported: pytest is an optional dependency).
_PYTEST_OK, _PYTEST_FAILED, _PYTEST_INTERRUPTED = 0, 1, 2
_PYTEST_INTERNAL, _PYTEST_USAGE, _PYTEST_NO_TESTS = 3, 4, 5
# The caller's pytest settings from the environment: not the suite's.
_CALLERS_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
CHECK_TIMEOUT_S = 600


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("conformance", help="run the DRA driver conformance suite on a cluster",
                       description="Check a DRA driver on a running cluster through the "
                                   "Kubernetes API and what its pods see (docs/conformance.md).")
    add_verbose(p)
    p.add_argument("--kubeconfig", type=Path, required=True, help="the cluster's kubeconfig")
    options.add_driver(p, any_name=True, default=None, required=True)
    p.add_argument("--device-class", default=None, metavar="CLASS",
                   help="a DeviceClass of the driver's devices (default: the capabilities "
                        "file's deviceClass, else the driver's name)")
    p.add_argument("--capabilities", type=Path, default=None, metavar="FILE",
                   help="what the driver declares it supports (YAML; default: the core only)")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="write junit.xml and conformance.md here")
    p.add_argument("--image", default=None, metavar="IMAGE",
                   help="workload image with sh, env and sleep (default: upstream's busybox)")
    p.add_argument("-k", dest="select", default=None, metavar="EXPR",
                   help="only the checks matching this pytest -k expression")
    p.set_defaults(func=_run)


def suite_dir() -> Path:
    from fakegpu import conformance

    return Path(conformance.__file__).resolve().parent


def pytest_command(args: argparse.Namespace) -> list[str]:
    here = suite_dir()
    cmd = [sys.executable, "-m", "pytest", str(here), "-c", str(here / "conformance.ini"),
           "--rootdir", str(here), "--confcutdir", str(here), "-p", "no:cacheprovider",
           "-p", "fakegpu.pytest_plugin"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd += ["-p", "pytest_timeout", "--timeout", str(CHECK_TIMEOUT_S)]
    cmd += ["--fakegpu-conformance-kubeconfig", str(args.kubeconfig.resolve()),
           "--fakegpu-conformance-driver", args.driver]
    if args.device_class:
        cmd += ["--fakegpu-conformance-device-class", args.device_class]
    if args.capabilities is not None:
        cmd += ["--fakegpu-conformance-capabilities", str(args.capabilities.resolve())]
    if args.image:
        cmd += ["--fakegpu-conformance-image", args.image]
    if args.report is not None:
        out = args.report.resolve()
        cmd += ["--fakegpu-conformance-report", str(out), f"--junitxml={out / 'junit.xml'}"]
    if args.select:
        cmd += ["-k", args.select]
    return cmd


def _check_select(expression: str) -> None:
    """-k as pytest will read it, before the suite starts (pytest's usage error is exit 4)."""
    try:  # pytest's own parser; private, so an API it no longer has leaves -k to pytest
        from _pytest.mark.expression import Expression
    except ImportError:
        return
    try:
        Expression.compile(expression)
    except (SyntaxError, ValueError) as err:  # pytest 9 raises SyntaxError
        why = err.msg if isinstance(err, SyntaxError) else str(err)
        raise InvalidInput(f"-k: {printable(repr(expression))}: {printable(why)}, "
                           "expected a pytest -k expression such as 'slices and not taint'"
                           ) from None


def _report_dir(path: Path) -> None:
    where = printable(str(path))
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"--report: {where}: not a directory, expected the directory "
                           "for junit.xml and conformance.md")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInput(f"--report: {where}: cannot create the directory: "
                           f"{err.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    if not args.kubeconfig.is_file():
        raise InvalidInput(f"--kubeconfig: {args.kubeconfig}: no such file")
    if args.capabilities is not None:
        from fakegpu.conformance import capabilities

        declared = capabilities.load(args.capabilities)  # bad input: one line, exit 2
        if declared.driver and declared.driver != args.driver:
            raise InvalidInput(f"{args.capabilities}: driver {declared.driver} is not "
                               f"--driver {args.driver}")
    try:
        import pytest  # noqa: F401  (the suite's runner)
    except ImportError:
        raise MissingPrerequisite("the conformance suite runs with pytest: "
                                  "pip install 'fakegpu[conformance]'") from None
    if args.select is not None:
        _check_select(args.select)
    if args.report is not None:
        _report_dir(args.report)
    from fakegpu.conformance import preflight

    version = preflight.server_version(args.kubeconfig)  # not usable: one line, exit 3
    if args.verbose:
        print(f"cluster: Kubernetes {version}", file=sys.stderr)
    code = run_suite(pytest_command(args), suite_env(os.environ))
    if args.report is not None and code in (_PYTEST_OK, _PYTEST_FAILED, _PYTEST_INTERRUPTED):
        print(f"report: {args.report / 'conformance.md'}, {args.report / 'junit.xml'}")
    return exit_code(code)


def run_suite(cmd: list[str], env: Mapping[str, str]) -> int:
    """Run pytest and wait for it. A stop (SIGTERM: a CI job's timeout or cancel; SIGINT:
    Ctrl-C, which the terminal sends to pytest too) reaches pytest as an interrupt, so it
    ends its session and writes what it has into the report, as a finished run does; killed
    instead, it would leave none. The child gets SIGINT's default back first: started in the
    background (a CI job's `cmd &`, nohup) it inherits SIGINT ignored, and Python then never
    raises KeyboardInterrupt, so the forwarded stop did nothing and the check ran on."""
    child = subprocess.Popen(cmd, env=dict(env), preexec_fn=_default_sigint)

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGTERM:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGINT)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def suite_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The suite's environment: the caller's, without its pytest settings and plugins."""
    env = {k: v for k, v in environ.items() if k not in _CALLERS_ENV}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def exit_code(pytest_code: int) -> int:
    """fakegpu's exit code for pytest's, saying in one line what a code other than pass or
    fail meant (docs/conformance.md)."""
    if pytest_code in (_PYTEST_OK, _PYTEST_FAILED):
        return EXIT_OK if pytest_code == _PYTEST_OK else EXIT_FAILED
    why, code = {
        _PYTEST_NO_TESTS: ("no conformance check ran (nothing collected or all deselected)",
                           EXIT_FAILED),
        _PYTEST_INTERRUPTED: ("the conformance run was interrupted", EXIT_INTERRUPTED),
        _PYTEST_USAGE: ("pytest refused the suite's command line (usage error, above)",
                        EXIT_INVALID),
        _PYTEST_INTERNAL: ("the conformance run stopped on an internal error (above)",
                           EXIT_FAILED),
    }.get(pytest_code, (f"pytest ended with exit code {pytest_code}", EXIT_FAILED))
    print(f"fakegpu: {why}", file=sys.stderr)
    return code
