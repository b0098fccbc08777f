"""The launcher's pure parts: each rank's command line, and the example's image rewritten to
the cluster's own."""

from __future__ import annotations

from pathlib import Path

from fakegpu.bandwidth import launcher, program
from fakegpu.testkit import k8s


def test_every_rank_gets_all_peers_rank_0_first() -> None:
    cmd = launcher.command(2, ["10.0.0.5", "10.0.1.7", "fd00::3"], "gb200-2", port=4000,
                           network_gbps=800, nic_gbps={"GPU-b": 200, "GPU-a": 400.0})
    assert cmd[0] == program.IN_IMAGE
    args = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    assert args == {"--rank": "2", "--peers": "10.0.0.5:4000,10.0.1.7:4000,[fd00::3]:4000",
                    "--port": "4000", "--node": "gb200-2", "--timeout": "60",
                    "--network-gbps": "800", "--nic-gbps": "GPU-a=400,GPU-b=200"}


def test_the_example_gets_the_clusters_workload_image() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "gb200-bandwidth.yaml"
    objects = k8s.load_manifests(example)
    fixed = launcher.with_image(objects, "fakegpu.local/workload:9.9.9")
    images = [c["image"] for o in fixed if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]]
    assert images == ["fakegpu.local/workload:9.9.9"]
    deployment = next(o for o in fixed if o["kind"] == "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "=".join(next(iter(labels.items()))) == launcher.LABEL
    # Other images are left alone.
    other = [{"spec": {"image": "busybox:1"}}]
    assert launcher.with_image(other, "fakegpu.local/workload:9") == other
