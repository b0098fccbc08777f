"""Offline image names: the workload image under the names users' manifests use.

A manifest written for a real cluster names images like ``ubuntu:22.04`` or
``nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04``; nodes that cannot pull would leave such pods
in ``ErrImagePull``. Each provider's ``tag_images`` (a step of ``up`` when asked) tags
fakegpu's workload image (a shell and busybox's tools) with those names in every node's
containerd (namespace ``k8s.io``, where the CRI looks), so the kubelet finds them present and
pulls nothing. With a registry nothing else changes: only tags
are added, and an image the user loads later under the same name replaces the tag.

Names are normalized as the kubelet and containerd do (``ubuntu:22.04`` is
``docker.io/library/ubuntu:22.04``). A name without a tag or with ``:latest`` is refused: the
kubelet always pulls those (pull policy ``Always``), so a tag could not help.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from fakegpu.errors import FakegpuError, InvalidInput

# The distribution reference grammar, reduced to what a tag needs: a path of lowercase
# components (with an optional registry host[:port] first) and a tag.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?)"
_TAG = r"[\w][\w.-]{0,127}"
_REFERENCE = re.compile(rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*:{_TAG}$")
DOCKER_HUB = "docker.io"


def normalize(name: str) -> str:
    """``name`` as containerd's CRI stores it; InvalidInput (one line) for a name no tag can
    serve."""
    if not _REFERENCE.match(name) or "@" in name:
        raise InvalidInput(f"image alias {name!r}: expected a name with a tag, like "
                           "ubuntu:22.04 or nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
    repo, tag = name.rsplit(":", 1)
    if tag == "latest":
        raise InvalidInput(f"image alias {name!r}: the kubelet always pulls :latest; "
                           "give a version tag")
    first, _, rest = repo.partition("/")
    if not rest or not ("." in first or ":" in first or first == "localhost"):
        rest, first = repo, DOCKER_HUB  # no registry host: Docker Hub
    if first == DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    return f"{first}/{rest}:{tag}"


def normalize_all(names: Iterable[str]) -> list[str]:
    """Each name normalized, in order, without repeats."""
    return list(dict.fromkeys(normalize(n) for n in names))


def tag_commands(ctr: Sequence[str], source: str, aliases: Sequence[str]) -> list[list[str]]:
    """``ctr`` (with its address) commands that tag ``source`` with each alias (replacing an
    earlier tag of that name: applying twice is harmless)."""
    return [[*ctr, "-n", "k8s.io", "images", "tag", "--force", source, alias]
            for alias in aliases]


def tag(source: str, names: Sequence[str], ctrs: Sequence[tuple[str, list[str]]]) -> None:
    """Tag ``source`` with each of ``names`` (normalized) through each node's ``ctr``
    (node name, command with its address): what each provider's ``tag_images`` runs."""
    from fakegpu.cluster.process import CommandError, run

    for node, ctr in ctrs:
        for cmd in tag_commands(ctr, source, names):
            try:
                run(cmd, timeout=60)
            except CommandError as err:
                raise FakegpuError(f"node {node}: tagging {source} failed: {err}") from None
