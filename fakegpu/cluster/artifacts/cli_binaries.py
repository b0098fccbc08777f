"""``fakegpu cluster binaries``: fill the binaries and images cache, print where things are.

The owner of ``fakegpu/cli/cluster.py`` calls ``add_commands(cluster_subparsers)``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from fakegpu.cluster.artifacts import binaries, images, kwok


def add_commands(cluster_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``binaries`` under ``fakegpu cluster``."""
    parser = cluster_sub.add_parser(
        "binaries",
        help="obtain (or find cached) the Kubernetes, etcd, containerd, runc, CNI and crictl "
        "binaries and the node images; print their paths",
        description=(
            "Print the cached binaries for a Kubernetes version, obtaining missing ones first: "
            f"from --bin-dir / {binaries.BIN_DIR_ENV}, release downloads, or a Go build "
            "(tens of minutes on a small machine, once). Supported: "
            + ", ".join(f"{m} ({p})" for m, p in binaries.SUPPORTED.items())
        ),
    )
    parser.add_argument("--k8s-version", metavar="1.N", default=None,
                        help=f"Kubernetes minor or pinned patch (default {binaries.DEFAULT_MINOR})")
    parser.add_argument("--bin-dir", metavar="DIR", type=Path, default=None,
                        help="a directory of prebuilt binaries to take (exact versions required)")
    parser.add_argument("--no-images", action="store_true",
                        help="do not build the pause and workload image archives")
    parser.add_argument("--kwok", action="store_true",
                        help="also KWOK, which only fleet topologies need (built from the Go "
                             "module proxy, minutes cold)")
    # fakegpu.cli's -o (this layer may not import it): the same choices, --json hidden.
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table",
                        help="table: one line per thing; json, yaml: one object "
                             "(default: %(default)s)")
    parser.add_argument("--json", dest="output", action="store_const", const="json",
                        help=argparse.SUPPRESS)
    parser.set_defaults(func=run_binaries)


def run_binaries(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    bins = binaries.ensure(args.k8s_version, bin_dir=args.bin_dir, console=console)
    found: dict[str, str] = {"k8s_version": bins.k8s_version}
    found.update({name: str(path) for name, path in bins.paths().items()})
    if args.kwok:
        found["kwok"] = str(kwok.ensure(bin_dir=args.bin_dir, console=console))
    if not args.no_images:
        imgs = images.ensure_images(console=console)
        found.update({
            "pause_ref": imgs.pause_ref, "pause_archive": str(imgs.pause_archive),
            "workload_ref": imgs.workload_ref, "workload_archive": str(imgs.workload_archive),
        })
    if args.output == "json":
        print(json.dumps(found, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(found, sort_keys=False), end="")
    else:
        width = max(len(k) for k in found)
        for key, value in found.items():
            print(f"{key:<{width}}  {value}")
    return 0
