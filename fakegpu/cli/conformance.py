"""``fakegpu conformance``: the DRA driver conformance suite against any cluster.

pytest runs the suite (``pytest --pyargs fakegpu.conformance`` with the ``--conformance-*``
options); this command checks its inputs first, so a wrong path or a bad capabilities file is
one line and exit code 2, and turns "no check ran" into a failure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from fakegpu.errors import EXIT_FAILED, InvalidInput, MissingPrerequisite, printable

from . import add_verbose

# pytest's exit code when nothing was collected or everything was deselected.
_NO_TESTS = 5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("conformance", help="run the DRA driver conformance suite on a cluster",
                       description="Check a DRA driver on a running cluster through the "
                                   "Kubernetes API and what its pods see (docs/conformance.md).")
    add_verbose(p)
    p.add_argument("--kubeconfig", type=Path, required=True, help="the cluster's kubeconfig")
    p.add_argument("--driver", required=True, metavar="NAME", help="the DRA driver's name")
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


def pytest_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "fakegpu.conformance",
           "-p", "no:cacheprovider", "-rA",
           "--conformance-kubeconfig", str(args.kubeconfig.resolve()),
           "--conformance-driver", args.driver]
    if args.device_class:
        cmd += ["--conformance-device-class", args.device_class]
    if args.capabilities is not None:
        cmd += ["--conformance-capabilities", str(args.capabilities.resolve())]
    if args.image:
        cmd += ["--conformance-image", args.image]
    if args.report is not None:
        out = args.report.resolve()
        cmd += ["--conformance-report", str(out), f"--junitxml={out / 'junit.xml'}"]
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
    code = subprocess.run(pytest_command(args), check=False).returncode
    if code == _NO_TESTS:
        print("fakegpu: no conformance check ran (nothing collected or all deselected)",
              file=sys.stderr)
        return EXIT_FAILED
    if args.report is not None:
        print(f"report: {args.report / 'conformance.md'}, {args.report / 'junit.xml'}")
    return code
