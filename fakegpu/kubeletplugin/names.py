"""The one rule for every name the plugin turns into a path component or an API path.

Driver names, instance ids (pod UIDs), claim UIDs, namespaces and claim names all come from
outside (flags, the kubelet's socket) and end up in file names (sockets, CDI specs,
checkpoint records) or apiserver URLs. Kubernetes never produces anything outside this rule
(UIDs are UUIDs, names are DNS subdomains or labels), so refusing the rest costs nothing and
makes ``../``, ``/``, NUL bytes and dot-files impossible by construction.
"""

from __future__ import annotations

import re

MAX_LEN = 253  # a DNS subdomain, the longest name Kubernetes gives anything
# Starts with a letter or digit (so never ".", ".." or a hidden file), then letters, digits,
# '.', '_' and '-' only: no '/', no NUL, nothing a shell or a path would interpret.
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def problem(value: str) -> str:
    """Why ``value`` is not a safe name, or "" when it is."""
    if not value:
        return "is empty"
    if len(value) > MAX_LEN:
        return f"is longer than {MAX_LEN} characters"
    if not _SAFE.fullmatch(value):
        return ("may hold only letters, digits, '.', '_' and '-', starting with a letter "
                "or digit")
    return ""


def check(what: str, value: str) -> str:
    """One line naming ``what`` and what was expected, or "" when ``value`` is safe."""
    why = problem(value)
    if not why:
        return ""
    shown = repr(value[:64]) + ("..." if len(value) > 64 else "")  # repr: one line, NULs visible
    return f"{what} {shown} {why}"
