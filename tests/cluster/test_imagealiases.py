"""Offline image names (fakegpu/cluster/imagealiases.py): the names the CRI looks up."""

from __future__ import annotations

import pytest

from fakegpu.cluster.imagealiases import normalize, normalize_all, tag_commands
from fakegpu.errors import InvalidInput


@pytest.mark.parametrize(("given", "stored"), [
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("nvidia/cuda:12.4.1-base-ubuntu22.04", "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"),
    ("nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
     "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"),
    ("localhost/app:1", "localhost/app:1"),
    ("registry.local:5000/team/app:v2", "registry.local:5000/team/app:v2"),
    ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
])
def test_names_are_what_the_cri_stores(given: str, stored: str) -> None:
    assert normalize(given) == stored
    assert normalize(stored) == stored  # already normalized: unchanged


@pytest.mark.parametrize("bad", ["ubuntu", "ubuntu:latest", "Ubuntu:22.04", "ubuntu@sha256:ab",
                                 "ubuntu:22.04 ", "", "a//b:1"])
def test_a_name_no_tag_can_serve_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        normalize(bad)
    assert "\n" not in str(err.value) and repr(bad) in str(err.value)


def test_repeats_collapse_in_order() -> None:
    assert normalize_all(["ubuntu:22.04", "b:1", "docker.io/library/ubuntu:22.04"]) == [
        "docker.io/library/ubuntu:22.04", "docker.io/library/b:1"]


def test_each_alias_is_one_forced_tag_in_the_cri_namespace() -> None:
    assert tag_commands(["ctr", "--address", "/s"], "fakegpu.local/workload:1", ["x/y:2"]) == [
        ["ctr", "--address", "/s", "-n", "k8s.io", "images", "tag", "--force",
         "fakegpu.local/workload:1", "x/y:2"]]
