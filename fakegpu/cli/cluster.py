"""``fakegpu cluster ...`` and ``fakegpu demo``: bring real Kubernetes clusters up and down."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from fakegpu import drivers
from fakegpu.cluster import driverchart
from fakegpu.cluster.driverchart import DRIVER_ROOT
from fakegpu.errors import EXIT_INVALID, FakegpuError, InvalidInput
from fakegpu.topology.packaged import default_topology

from . import add_verbose, argtypes, options, show_help

if TYPE_CHECKING:
    from fakegpu.cluster.provider import ClusterInfo, Clusters

DEFAULT_NAME = "fakegpu"
DEMO_POD = "fakegpu-demo"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster`` (with its subcommands) and ``demo`` to the top-level parser."""
    cluster = sub.add_parser("cluster", help="real Kubernetes clusters with fake GPUs",
                             description="Create, inspect and remove a multi-node Kubernetes "
                                         "cluster of real binaries with fake GPUs (embedded: "
                                         "host processes, no containers).")
    cmds = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")

    def name_arg(p: argparse.ArgumentParser, *, creates: bool = False,
                 positional: bool = False) -> None:
        # A command that creates a cluster makes it on the embedded provider unless told;
        # any other finds the cluster on whichever provider has it.
        options.add_cluster(p, default=DEFAULT_NAME, type_=argtypes.cluster_name,
                            positional=positional)
        options.add_provider(p, default="embedded" if creates else None)
        add_verbose(p)

    up = cmds.add_parser("up", help="create a cluster and wait until it is ready",
                         description="Start a control plane and one worker per topology node; "
                                     "return once every node is Ready and has its "
                                     "ResourceSlices.")
    up.add_argument("--topology", type=argtypes.topology, default=None, metavar="NAME|FILE",
                    help=argtypes.TOPOLOGY_HELP)
    up.add_argument("--k8s-version", default=None, metavar="1.N",
                    help="Kubernetes minor (default: the newest supported)")
    up.add_argument("--retain", "--keep-on-failure", dest="retain", action="store_true",
                    help="on failure keep everything for debugging (remove it with down)")
    up.add_argument("--timeout", type=argtypes.seconds, default=180.0, metavar="SECONDS",
                    help="limit for each readiness wait (default: %(default)s)")
    options.add_driver(up, help=f"the plugins' driver: {options.KEY_HELP} and nvidia.com/gpu")
    options.add_nic_driver(up)
    up.add_argument("--image-alias", action="append", default=[], metavar="NAME:TAG",
                    help="also name the workload image NAME:TAG on every node (repeatable), "
                         "so manifests naming e.g. ubuntu:22.04 run on nodes that cannot "
                         "pull (docs/cluster.md#offline-image-names)")
    _plugin_options(up)
    name_arg(up, creates=True)
    up.set_defaults(func=_up)

    down = cmds.add_parser("down", help="remove a cluster and everything it made (idempotent)")
    name_arg(down)
    down.set_defaults(func=_down)

    status = cmds.add_parser("status", help="describe a cluster (exit 2 when there is none)")
    options.add_output(status, table="the summary for people")
    name_arg(status)
    status.set_defaults(func=_status)

    logs = cmds.add_parser("logs", help="copy every component's logs into a directory")
    logs.add_argument("--out", type=Path, required=True, help="directory to write into")
    name_arg(logs)
    logs.set_defaults(func=_logs)

    node = cmds.add_parser("node", help="stop or start one worker node, or restart its plugin")
    node_cmds = node.add_subparsers(dest="node_command", metavar="ACTION")
    for action, text in (("stop", "stop the node's plugin, kubelet and containerd (a "
                                  "simulated node: NotReady, its ResourceSlices withdrawn)"),
                         ("start", "start a stopped node and wait until it is Ready"),
                         ("restart-plugin", "stop the node's GPU plugin (fakegpu's or "
                                            "--plugin-bin's) as the kubelet stops a deleted "
                                            "plugin pod, start it again and wait until its "
                                            "slices are published; pods keep running")):
        p = node_cmds.add_parser(action, help=text)
        options.add_node(p, help="the worker's name (as in the topology)", positional=True)
        name_arg(p)
        p.set_defaults(func={"stop": _node_stop, "start": _node_start}.get(
            action, _node_restart_plugin))
    node.set_defaults(func=show_help(node))

    upgrade = cmds.add_parser(
        "upgrade-plugin", help="roll every node's plugin to another version, node by node",
        description="Replace the plugin on every worker by the given version as its DaemonSet "
                    "would (docs/upgrades.md): surge starts the new instance beside the old one "
                    "and stops the old one once the kubelet registered the new (maxSurge 1); "
                    "sequential stops the old one first (maxUnavailable 1). Exit 1 when a new "
                    "instance never becomes ready: the rollout stops there and the previous "
                    "version keeps serving; upgrading to that version again rolls back.")
    to = upgrade.add_mutually_exclusive_group(required=True)
    to.add_argument("--to", dest="plugin_version", metavar="VERSION",
                    help="the version to roll to (embedded: the plugin's version stamp; "
                         "kind: the tag of an image built with that stamp)")
    # The old spelling, hidden: `--version` means the program's version everywhere else.
    to.add_argument("--version", dest="plugin_version", help=argparse.SUPPRESS)
    upgrade.add_argument("--broken", action="store_true",
                         help="a broken release of that version: it never becomes ready")
    upgrade.add_argument("--strategy", choices=("surge", "sequential"), default="surge",
                         help="surge: maxSurge 1 / maxUnavailable 0; sequential: maxSurge 0 / "
                              "maxUnavailable 1 (default: %(default)s)")
    upgrade.add_argument("--timeout", type=argtypes.seconds, default=120.0, metavar="SECONDS",
                         help="how long each node's new instance may take to become ready "
                              "(default: %(default)s)")
    name_arg(upgrade, positional=True)
    upgrade.set_defaults(func=_upgrade_plugin)

    k8s = cmds.add_parser(
        "upgrade-kubernetes",
        help="move a running cluster to another Kubernetes minor, control plane then kubelets",
        description="Move a running embedded cluster to another cached Kubernetes minor, one "
                    "minor up or down (docs/upgrades.md#kubernetes-version-skew): an upgrade "
                    "replaces kube-apiserver, kube-controller-manager and kube-scheduler, "
                    "then each node's kubelet in turn; a downgrade the kubelets first. Pods, "
                    "containerd and the plugins keep running; the plugins register again "
                    "with each new kubelet. Exit 2 for a version not supported or not one "
                    "minor away, 3 when its binaries are not cached (`fakegpu cluster "
                    "binaries --k8s-version 1.N`), 1 when a component does not come up (run "
                    "the command again to finish).")
    k8s.add_argument("--to", dest="k8s_to", required=True, metavar="1.N",
                     help="the Kubernetes minor (or pinned patch) to move to")
    k8s.add_argument("--timeout", type=argtypes.seconds, default=180.0, metavar="SECONDS",
                     help="limit for each readiness wait (default: %(default)s)")
    name_arg(k8s, positional=True)
    k8s.set_defaults(func=_upgrade_kubernetes)

    _add_binaries_commands(cmds)
    cluster.set_defaults(func=show_help(cluster))

    demo = sub.add_parser("demo", help="a cluster with fake GPUs and a GPU pod, in one command",
                          description="Bring up the embedded cluster on the default topology "
                                      "(or reuse a healthy one), run a pod that claims one GPU, "
                                      "and show how to use the cluster.")
    demo.add_argument("--topology", type=argtypes.topology, default=None,
                      metavar="NAME|FILE", help=argtypes.TOPOLOGY_HELP)
    demo.add_argument("--k8s-version", default=None, metavar="1.N",
                      help="Kubernetes minor (default: the newest supported)")
    name_arg(demo, creates=True)
    demo.set_defaults(func=_demo)


def _plugin_options(up: argparse.ArgumentParser) -> None:
    g = up.add_argument_group(
        "another vendor's kubelet plugin (embedded provider; docs/nvidia-driver.md)")
    g.add_argument("--plugin-bin", type=Path, default=None, metavar="PATH",
                   help="run this kubelet plugin on every node instead of fakegpu's, with the "
                        "NVIDIA host it expects (driver root, device nodes, MIG capability "
                        "files) built from the node's fake NVML state")
    g.add_argument("--plugin-preset", choices=("nvidia", "dra-example"), default=None,
                   help="the flags that plugin needs here: nvidia (NVIDIA's "
                        "gpu-kubelet-plugin), dra-example (kubernetes-sigs/dra-example-driver)")
    g.add_argument("--plugin-arg", action="append", default=[], metavar="ARG",
                   help="one more argument (repeatable); {node}, {kubeconfig}, {cdi_root}, "
                        "{driver_root}, {registrar_dir}, {plugins_dir}, {kubelet_root}, "
                        "{state_dir}, {image}, {namespace} are filled in per node")
    g.add_argument("--plugin-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the plugin (repeatable)")
    g.add_argument("--plugin-driver", default=None, metavar="NAME",
                   help="the DRA driver name it publishes (default: the preset's, else the "
                        "cluster's --driver; required with --plugin-chart)")
    g.add_argument("--plugin-beside", action="store_true",
                   help="run it beside fakegpu's plugin instead of in its place")
    g.add_argument("--plugin-templates", type=Path, default=None, metavar="DIR",
                   help="shown to the plugin at /templates (NVIDIA's reads its MPS control "
                        "daemon's Deployment there: templates/ of its checkout)")
    c = up.add_argument_group(
        "another vendor's driver as it ships, a Helm chart (kind provider; docs/vendors.md)")
    c.add_argument("--plugin-chart", default=None, metavar="PATH|OCI",
                   help="install this chart unchanged over fake GPU nodes instead of fakegpu's "
                        "driver; its driver root is " + DRIVER_ROOT + " on every node "
                        "(needs --plugin-driver)")
    c.add_argument("--plugin-values", action="append", type=Path, default=[], metavar="FILE",
                   help="a values file for that chart (repeatable, applied in order)")
    c.add_argument("--plugin-image", action="append", default=[], metavar="IMAGE",
                   help="a local Docker image the chart runs, loaded into every node "
                        "(repeatable)")


def _add_binaries_commands(cmds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # `fakegpu cluster binaries ...` belongs to the binaries concern; absent until it lands.
    try:
        mod = importlib.import_module("fakegpu.cluster.artifacts.cli_binaries")
    except ModuleNotFoundError:
        return
    mod.add_commands(cmds)


def _console() -> Console:
    return Console(stderr=True)


def _provider(args: argparse.Namespace, console: Console, *, retain: bool = False
              ) -> Clusters:
    from fakegpu.cluster import get_provider, provider_of

    # No --provider: the one that has a cluster of that name, else the embedded one (whose
    # down is a no-op and status None for a cluster that is nowhere).
    name = args.provider or provider_of(args.cluster) or "embedded"
    return get_provider(name, console=console,
                        timeout=float(getattr(args, "timeout", 180.0)), retain=retain)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a new cluster is (``Clusters.up``'s keywords): driver, another vendor's plugin,
    image aliases, NIC driver."""
    return {"driver": getattr(args, "driver", drivers.DEFAULT_KEY), "plugin": _external(args),
            "image_aliases": tuple(getattr(args, "image_alias", None) or ()),
            "nic_driver": getattr(args, "nic_driver", drivers.NIC_DEFAULT_KEY),
            "chart": _chart(args)}


def _chart(args: argparse.Namespace) -> Any:
    """``--plugin-chart`` and friends as a DriverChart (None without --plugin-chart)."""
    if getattr(args, "plugin_chart", None) is None:
        return None
    return driverchart.parse(args.plugin_chart, driver=args.plugin_driver,
                             values=args.plugin_values, images=args.plugin_image)


def _external(args: argparse.Namespace) -> Any:
    """``--plugin-bin`` and friends as an ExternalPlugin (None without --plugin-bin)."""
    if getattr(args, "plugin_bin", None) is None:
        return None
    from fakegpu.cluster import external

    return external.parse(args.plugin_bin, args.plugin_arg, preset=args.plugin_preset,
                          driver=args.plugin_driver, beside=args.plugin_beside,
                          env=args.plugin_env, templates=args.plugin_templates)


def _up(args: argparse.Namespace) -> int:
    console = _console()
    topology = args.topology or default_topology()
    provider = _provider(args, console, retain=args.retain)
    start = time.monotonic()
    # A bad alias name exits 2 before bring-up (the lifecycle checks the spec first).
    info = provider.up(args.cluster, topology, args.k8s_version, **_settings(args))
    sim = info.extra.get("simulated_nodes")
    console.print(f"[bold green]cluster {info.name!r} is ready[/] "
                  f"({len(info.nodes)} nodes{f' + {sim} simulated' if sim else ''}, "
                  f"Kubernetes {info.k8s_version}, "
                  f"{time.monotonic() - start:.0f}s)")
    _print_usage(console, info, provider.down_command(info.name))
    print(info.kubeconfig)  # stdout: the one thing a script wants
    return 0


def _print_usage(console: Console, info: Any, down: str) -> None:
    console.print(f"  kubeconfig: {info.kubeconfig}")
    console.print(f"  export KUBECONFIG={info.kubeconfig}")
    console.print("  kubectl get nodes; kubectl get resourceslices")
    console.print(f"  remove it: {down}")


def _down(args: argparse.Namespace) -> int:
    console = _console()
    with console.status(f"removing cluster {args.cluster!r} ..."):
        _provider(args, console).down(args.cluster)
    console.print(f"cluster {args.cluster!r} removed (or was not there)")
    return 0


def _status(args: argparse.Namespace) -> int:
    info = _provider(args, _console()).status(args.cluster)
    if info is None:
        if args.output != "table":
            print("null")
        # Exit 2, as every command naming a cluster that is not there (README's exit codes).
        print(f"fakegpu: no cluster {args.cluster!r}", file=sys.stderr)
        return EXIT_INVALID
    options.emit(info.to_json(), args.output, lambda: _status_table(info))
    return 0


def _status_table(info: ClusterInfo) -> None:
    print(f"cluster     {info.name} ({info.provider}, Kubernetes {info.k8s_version}, "
          f"{info.extra.get('phase')})")
    print(f"kubeconfig  {info.kubeconfig}")
    print(f"topology    {info.topology}")
    print(f"driver      {info.driver_name}")
    print(f"nic driver  {info.nic_driver or 'none'}")
    print(f"workload    {info.workload_image}")
    cp = info.extra.get("control_plane", {})
    print("control     " + ", ".join(f"{k}={'up' if v else 'DOWN'}" for k, v in cp.items()))
    ips = info.extra.get("node_ips", {})
    for n in info.nodes:
        print(f"node        {n.name:<20} {ips.get(n.name, ''):<15} "
              f"{'running' if n.running else 'STOPPED'}")
    if info.extra.get("simulated_nodes"):
        print(f"simulated   {info.extra['simulated_nodes']} nodes (KWOK, fleet slice publisher)")


def _logs(args: argparse.Namespace) -> int:
    written = _provider(args, _console()).logs(args.cluster, args.out)
    print(f"{len(written)} files written to {args.out}")
    return 0


def _node_stop(args: argparse.Namespace) -> int:
    return _node(args, "stopping", "stopped")


def _node_start(args: argparse.Namespace) -> int:
    return _node(args, "starting", "is Ready")


def _node_restart_plugin(args: argparse.Namespace) -> int:
    return _node(args, "restarting the plugin of", "has its plugin serving again")


def _node(args: argparse.Namespace, doing: str, done: str) -> int:
    if not args.node:
        raise InvalidInput("--node NAME is required (a worker of the cluster)")
    console = _console()
    provider = _provider(args, console)
    act = {"stopping": provider.stop_node, "starting": provider.start_node}.get(
        doing, provider.restart_plugin)
    with console.status(f"{doing} node {args.node} ..."):
        act(args.cluster, args.node)
    console.print(f"node {args.node} {done}")
    return 0


def _upgrade_plugin(args: argparse.Namespace) -> int:
    from fakegpu.cluster.upgrade import check_target

    console = _console()
    target = check_target(args.plugin_version, args.broken, args.strategy,
                          ready_timeout_s=args.timeout)
    provider = _provider(args, console)
    changed = provider.upgrade_plugin(args.cluster, target, say=console.print)
    console.print(f"plugin version {target.version} serves on every node "
                  f"({len(changed)} changed)")
    return 0


def _upgrade_kubernetes(args: argparse.Namespace) -> int:
    console = _console()
    provider = _provider(args, console)
    changed = provider.upgrade_kubernetes(args.cluster, args.k8s_to, say=console.print)
    info = provider.status(args.cluster)
    version = info.k8s_version if info else args.k8s_to
    console.print(f"cluster {args.cluster} runs Kubernetes {version} "
                  f"({', '.join(changed) or 'nothing'} changed)")
    return 0


# --- demo --------------------------------------------------------------------------------------


def demo_manifest(workload_image: str, device_class: str, api: str = "v1") -> str:
    """A claim template for one GPU and a pod using it (resource.k8s.io ``api``)."""
    request = ("        exactly:\n          deviceClassName: {dc}\n" if api == "v1"
               else "        deviceClassName: {dc}\n").format(dc=device_class)
    return f"""\
apiVersion: resource.k8s.io/{api}
kind: ResourceClaimTemplate
metadata:
  name: fakegpu-demo-gpu
  namespace: default
spec:
  spec:
    devices:
      requests:
      - name: gpu
{request}---
apiVersion: v1
kind: Pod
metadata:
  name: {DEMO_POD}
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  dnsPolicy: Default  # the embedded cluster has no cluster DNS
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: fakegpu-demo-gpu
  containers:
  - name: main
    image: {workload_image}
    imagePullPolicy: Never
    command: ["sh", "-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; sleep 3600"]
    resources:
      claims:
      - name: gpu
"""


def _demo(args: argparse.Namespace) -> int:
    from fakegpu.cluster.artifacts import binaries

    console = _console()
    provider = _provider(args, console)
    name = args.cluster
    if provider.healthy(name):
        console.print(f"reusing the running cluster {name!r}")
    else:
        if provider.status(name) is not None:
            console.print(f"cluster {name!r} exists but is not healthy: recreating it")
            provider.down(name)
        provider.up(name, args.topology or default_topology(), args.k8s_version,
                    **_settings(args))
    info = provider.status(name)
    if info is None:
        raise FakegpuError(f"cluster {name!r} vanished while the demo ran")
    with console.status("running a pod that claims one GPU ..."):
        node, log = _run_demo_pod(info)
    console.print(f"[bold green]pod {DEMO_POD} runs on node {node} with one fake GPU:[/] {log}",
                  soft_wrap=True)
    console.print("\nTry it:")
    console.print(f"  export KUBECONFIG={info.kubeconfig}")
    bins = binaries.cached(info.k8s_version)
    if bins is not None:
        # The cluster's own kubectl matches its version; a fresh host may have none on PATH.
        console.print(f"  export PATH={bins.kubectl.parent}:$PATH")
    console.print("  kubectl get nodes")
    console.print("  kubectl get resourceslices")
    console.print(f"  kubectl get resourceclaims; kubectl logs {DEMO_POD}")
    console.print(f"  kubectl exec {DEMO_POD} -- env | grep NVIDIA")
    state = info.node(node).nvml_state
    console.print(f"  fakegpu smi --state {state}   # that node's GPUs, as NVML reports them",
                  soft_wrap=True)
    console.print(f"  {provider.down_command(name)}   # remove everything")
    if "NVIDIA_VISIBLE_DEVICES=" not in log:
        raise FakegpuError(f"the demo pod's output lacks NVIDIA_VISIBLE_DEVICES: {log!r}")
    return 0


def _run_demo_pod(info: ClusterInfo, timeout: float = 180.0) -> tuple[str, str]:
    """Apply the demo claim template and pod, wait until it runs; its node and output."""
    import yaml

    from fakegpu.kube import api as kubeapi
    from fakegpu.wait import NotYet, WaitTimeout, wait_for

    with kubeapi.session(info.kubeconfig) as api:
        manifest = demo_manifest(info.workload_image, info.driver_name,
                                 kubeapi.resource_version(api))
        kubeapi.apply(api, list(yaml.safe_load_all(manifest)))

        def running() -> dict[str, Any]:
            pod: dict[str, Any] = kubeapi.get_json(
                api, f"/api/v1/namespaces/default/pods/{DEMO_POD}")
            status = pod.get("status", {})
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in status.get("conditions") or []):
                return pod
            raise NotYet(_pod_state(status))

        try:
            pod = wait_for(running, what=f"pod {DEMO_POD} to be Ready", timeout=timeout,
                           interval=1.0, transient=kubeapi.ERRORS)
        except WaitTimeout as err:
            raise FakegpuError(f"the demo pod did not become Ready: {err}") from None
        return str(pod["spec"]["nodeName"]), kubeapi.pod_log(api, "default", DEMO_POD).strip()


def _pod_state(status: dict[str, Any]) -> str:
    """A pod's phase, its false conditions and waiting containers, on one line."""
    parts = [f"phase={status.get('phase')}"]
    parts += [f"{c.get('type')}={c.get('status')} ({c.get('reason')}: {c.get('message')})"
              for c in status.get("conditions") or [] if c.get("status") != "True"]
    parts += [f"{cs.get('name')} waiting {w.get('reason')}: {w.get('message')}"
              for cs in status.get("containerStatuses") or []
              if (w := (cs.get("state") or {}).get("waiting"))]
    return "; ".join(parts)
