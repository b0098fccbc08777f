"""``fakegpu completion bash|zsh``: a shell completion script made from the parser itself.

shtab writes it from the argparse tree, so every command and option (not the hidden old
spellings) completes as soon as it exists; no list is kept by hand.
"""

from __future__ import annotations

import argparse
import sys

from fakegpu.errors import EXIT_OK

SHELLS = ("bash", "zsh")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description='Print the completion script for a shell: eval "$(fakegpu completion '
                    'bash)" in ~/.bashrc; zsh: fakegpu completion zsh > a directory of '
                    '$fpath as _fakegpu, or eval "$(fakegpu completion zsh)" after compinit.')
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    p.set_defaults(func=_completion)


def script(shell: str) -> str:
    """The completion script of the whole ``fakegpu`` command for ``shell``."""
    import shtab

    from fakegpu.cli import build_parser

    return str(shtab.complete(build_parser(), shell=shell))


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell))
    return EXIT_OK
