"""``fakegpu bandwidth run|report``: the simulated nvbandwidth job of a fake GB200 (or any)
cluster, and its GPU-by-GPU matrix drawn as a heatmap (docs/gb200.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fakegpu.errors import EXIT_OK, InvalidInput, printable
from fakegpu.fsutil import atomic_write, read_input

from . import add_verbose, argtypes, options, show_help


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bw = sub.add_parser("bandwidth", help="the simulated nvbandwidth job and its heatmap",
                        description="Run the nvbandwidth-like job in a cluster's worker pods "
                                    "and draw its GPU-by-GPU matrix (docs/gb200.md).")
    add_verbose(bw)
    bw.set_defaults(func=show_help(bw))
    cmds = bw.add_subparsers(dest="bandwidth_command", metavar="COMMAND")

    run = cmds.add_parser("run", help="run one rank in each worker pod, write the results",
                          description="Start the nvbandwidth program in each running worker "
                                      "pod (one per node, rank order = node name order), "
                                      "passing each its peers' pod IPs; merge their rows.")
    add_verbose(run)
    options.add_cluster(run, required=True, type_=argtypes.cluster_name,
                        help="the fakegpu cluster (its kubeconfig and topology)")
    options.add_provider(run)
    run.add_argument("-f", "--filename", type=Path, default=None, metavar="MANIFEST",
                     help="apply this first (e.g. examples/gb200-bandwidth.yaml; fakegpu's "
                          "workload image gets the cluster's tag) and wait for its workers")
    run.add_argument("-n", "--namespace", default=None,
                     help="the worker pods' namespace (default: the manifest's Namespace)")
    run.add_argument("--workers", type=int, default=None, metavar="N",
                     help="with -f: how many worker pods to wait for (default: one per node "
                          "of the topology)")
    run.add_argument("--selector", default=None, metavar="LABELS",
                     help="the worker pods (default: app.kubernetes.io/name=nvbandwidth)")
    run.add_argument("--network-gbps", type=argtypes.positive, default=None, metavar="GBPS",
                     help="node-to-node speed per GPU without a compute NIC near it in the "
                          "topology's PCIe tree (default: the topology's network); a GPU "
                          "with one goes at that NIC's speed")
    run.add_argument("--timeout", type=int, default=60, metavar="S",
                     help="how long rank 0 waits for the others (default 60)")
    run.add_argument("--out", type=Path, required=True, metavar="RESULTS.json",
                     help="where to write the merged results (JSON)")
    run.set_defaults(func=_run)

    rep = cmds.add_parser("report", help="draw a results file as a heatmap + markdown table",
                          description="Draw the GPU-by-GPU matrix of RESULTS.json as a heatmap "
                                      "(nodes marked) and write it as a markdown table.")
    add_verbose(rep)
    rep.add_argument("results", type=Path, metavar="RESULTS.json",
                     help="the results `fakegpu bandwidth run` wrote")
    rep.add_argument("--out", type=Path, required=True, metavar="HEATMAP.png",
                     help="where to write the heatmap (PNG)")
    rep.add_argument("--table", type=Path, default=None, metavar="TABLE.md",
                     help="the markdown table (default: --out with .md)")
    rep.add_argument("--title", default=None, help="the heatmap's title")
    rep.set_defaults(func=_report)


def _run(args: argparse.Namespace) -> int:
    from kubernetes import client as kclient

    from fakegpu.bandwidth import launcher, model
    from fakegpu.cluster import nodenvml
    from fakegpu.kube import api as kubeapi
    from fakegpu.topology.load import load_topology

    if args.timeout < 1:
        raise InvalidInput(f"--timeout: {args.timeout}, expected at least 1 second")
    objects = None if args.filename is None else _manifest(args.filename)  # before any lookup
    info = nodenvml.find(args.cluster, args.provider).status(args.cluster)
    if info is None:
        raise InvalidInput(f"no cluster {args.cluster!r}")
    topology = load_topology(info.topology)
    gbps = args.network_gbps or topology.network.gbps_per_gpu
    api = kubeapi.connect(info.kubeconfig)
    core = kclient.CoreV1Api(api)
    selector = args.selector or launcher.LABEL
    namespace = args.namespace
    if objects is not None:
        if namespace is None:
            namespace = next((o["metadata"]["name"] for o in objects
                              if o.get("kind") == "Namespace"), None)
        namespace = namespace or "default"
        kubeapi.apply(api, launcher.with_image(objects, info.workload_image),
                      namespace=namespace)
        pods = launcher.wait_workers(core, namespace, args.workers or len(topology.nodes),
                                     selector)
    else:
        namespace = namespace or "default"
        pods = launcher.worker_pods(core, namespace, selector)
    results = launcher.run(core, namespace, pods, network_gbps=gbps,
                           nic_gbps=model.nic_rates(topology), timeout=args.timeout)
    atomic_write(args.out, json.dumps(results, indent=1) + "\n")
    paths = {p for row in results["paths"] for p in row} - {"self"}
    print(f"{printable(str(args.out))}: {len(results['gpus'])} GPUs on {len(pods)} nodes "
          f"(simulated; paths: {', '.join(sorted(paths))})")
    return EXIT_OK


def _manifest(path: Path) -> list[dict[str, Any]]:
    """The objects of a manifest file, read as every untrusted input: a bounded read of a
    regular file, then the guarded YAML reader (an alias bomb of 1 KB was a MemoryError)."""
    from fakegpu.topology.yamlsafe import MAX_BYTES, YamlRejected, read_yaml_all

    where = printable(str(path))
    data = read_input(path, MAX_BYTES, "manifest (YAML)")
    try:
        documents = read_yaml_all(data)
    except YamlRejected as err:
        raise InvalidInput(err.problem.line(where)) from None
    objects = []
    for k, doc in enumerate(documents, 1):
        if doc is None:
            continue
        metadata = doc.get("metadata") if isinstance(doc, dict) else None
        if (not isinstance(doc, dict) or not isinstance(doc.get("apiVersion"), str)
                or not isinstance(doc.get("kind"), str) or not isinstance(metadata, dict)
                or not isinstance(metadata.get("name"), str)):
            raise InvalidInput(f"{where}: document {k}: expected a Kubernetes object with "
                               "apiVersion, kind and metadata.name")
        objects.append(doc)
    if not objects:
        raise InvalidInput(f"{where}: no Kubernetes object, expected the bandwidth job's "
                           "manifest (examples/gb200-bandwidth.yaml)")
    return objects


def _distinct(paths: dict[str, Path]) -> None:
    """Refuse an output that is the input or the other output: the write would replace it."""
    seen: dict[Path, str] = {}
    for name, path in paths.items():
        key = path.resolve()
        if key in seen:
            raise InvalidInput(f"{name}: {printable(str(path))} is also {seen[key]}, expected "
                               "separate files (writing it would replace the other)")
        seen[key] = name


def _report(args: argparse.Namespace) -> int:
    from fakegpu.bandwidth import report, results

    table = args.table or args.out.with_suffix(".md")
    _distinct({"RESULTS.json": args.results, "--out": args.out, "--table": table})
    data = results.load(args.results)
    title = args.title or (f"simulated GPU-to-GPU bandwidth ({data.unit}): "
                           f"{len(set(data.nodes))} nodes, {len(data.labels)} GPUs")
    report.write(data, args.out, table, title)
    print(f"{printable(str(args.out))}, {printable(str(table))}")
    return EXIT_OK
