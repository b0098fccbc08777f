"""The ``fakegpu`` command: a thin dispatcher over one module per concern.

Each module in this package exposes ``register(subparsers)``, adding its commands with
``set_defaults(func=...)``; a command function takes the parsed args and returns an exit code.
Errors derived from FakegpuError are printed as one line; nothing prints a traceback unless -v.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from fakegpu import __version__
from fakegpu.errors import (
    EXIT_CLOSED_PIPE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    FakegpuError,
    printable,
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its refusals on one line (no usage block above it), exit 2;
    every subcommand's parser is of this class too (argparse makes them of the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"{self.prog}: {printable(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fakegpu",
        description="Fake GPU hardware (NVML) and a DRA test kit for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"fakegpu {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Imported late: the command modules import add_verbose from this package.
    from . import (
        bandwidth,
        cluster,
        completion,
        computedomain,
        conformance,
        kind,
        nic,
        nvml,
        plugin,
        topology,
    )
    from . import fleet as fleet_cli

    for module in (topology, nvml, plugin, nic, cluster, fleet_cli, kind, conformance, bandwidth,
                   computedomain, completion):
        module.register(sub)
    for command in subcommands(parser):
        if "--verbose" not in command._option_string_actions:
            add_verbose(command)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser``, groups and leaves, each once (aliases share one)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *subcommands(child)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_INVALID
    try:
        code = int(func(args) or 0)
        sys.stdout.flush()  # a reader gone shows here, inside the handler, not at exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except FakegpuError as err:
        if args.verbose:
            logging.getLogger("fakegpu").exception("command failed")
        print(f"fakegpu: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("fakegpu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _closed_pipe() -> int:
    """The reader of stdout went away (``fakegpu ... | head -1``): stop quietly, as a program
    killed by SIGPIPE does. Python's documented recipe: point stdout at /dev/null, so the
    interpreter's flush at exit finds no pipe to fail on again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """Every command accepts -v after its name too (``fakegpu topology show -v F``);
    ``build_parser`` adds it to each one that did not."""
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging")


def show_help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The command of a group called without a subcommand: its help on stderr, exit 2."""

    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_INVALID

    return show
