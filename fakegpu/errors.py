"""Errors every fakegpu command reports as one line, and the exit codes they map to.

Exit codes (documented in README.md, a contract for scripts):
  0  success
  1  the operation failed (a component did not start, a check failed)
  2  invalid input: a bad topology, bad arguments, a bad request
  3  a prerequisite is missing on this host (a tool, root, a kernel feature)
  130 interrupted
  141 the reader of the output went away (a closed pipe: 128 + SIGPIPE, as other tools)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_PREREQ = 3
EXIT_INTERRUPTED = 130
EXIT_CLOSED_PIPE = 141


class FakegpuError(Exception):
    """Base error: its message is printed as one line, without a traceback."""

    exit_code = EXIT_FAILED


class InvalidInput(FakegpuError):
    """The user gave us something we cannot use (file, field, argument)."""

    exit_code = EXIT_INVALID


class MissingPrerequisite(FakegpuError):
    """The host lacks something we need, and we cannot install it ourselves."""

    exit_code = EXIT_PREREQ


def printable(text: str) -> str:
    """``text`` with unprintable characters escaped (``\\n``, ``\\x1b``, ``\\udcff`` from an
    undecodable file name), so a message built from user data stays one printable line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)
