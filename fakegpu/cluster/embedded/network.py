"""The embedded cluster's network on the host: a slot, node addresses, forwarding rules.

Each cluster takes a free slot (``state.MAX_SLOTS``): its node addresses live on one bridge
(``fg<slot>d``), each node's pods on a bridge of its own (``fg<slot>b<i>``), and pods of
different nodes talk through the host, which routes between the node bridges.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
from pathlib import Path

from fakegpu.cluster import cleanup
from fakegpu.cluster.embedded.controlplane import port_in_use
from fakegpu.cluster.embedded.layout import KUBELET_HEALTHZ_PORT, KUBELET_PORT
from fakegpu.cluster.embedded.state import MAX_SLOTS, ClusterState, other_slots, slot_network
from fakegpu.cluster.process import CommandError, run
from fakegpu.errors import InvalidInput


def address_interface(slot: int) -> str:
    return f"fg{slot}d"


def free_slot(skip: set[int]) -> int:
    out = run(["ip", "-o", "-4", "addr", "show"], timeout=10).stdout
    used_addrs = {f[3].split("/")[0] for line in out.splitlines()
                  if len(f := line.split()) > 3}
    used_slots = other_slots()
    for slot in range(MAX_SLOTS):
        node_prefix, pod_prefix = slot_network(slot)
        nets = [ipaddress.ip_network(f"{node_prefix}.0/24"),
                ipaddress.ip_network(f"{pod_prefix}.0.0/16")]
        clash = any(ipaddress.ip_address(a) in n for a in used_addrs for n in nets
                    if ":" not in a)
        if slot not in used_slots | skip and not clash and not cleanup.link_exists(
                address_interface(slot)):
            return slot
    raise InvalidInput(f"all {MAX_SLOTS} cluster slots are in use: bring a cluster down")


def create(st: ClusterState) -> None:
    """Claim a slot, give every node its address, let pods' traffic through the host."""
    # Claim a slot by creating its address interface: `ip link add` fails when another
    # `up` took the same slot a moment ago, and then the next free slot is tried.
    tried: set[int] = set()
    while True:
        st.slot = free_slot(tried)
        addr_if = address_interface(st.slot)
        st.interfaces = [addr_if, *(st.layout(n).bridge for n in st.nodes)]
        st.save()
        # A bridge without ports holds the node addresses: this kernel has no dummy
        # driver, and local addresses work on any interface that is up.
        res = run(["ip", "link", "add", addr_if, "type", "bridge"], timeout=10, check=False)
        if res.returncode == 0:
            break
        if not cleanup.link_exists(addr_if):
            raise CommandError(["ip", "link", "add", addr_if, "type", "bridge"],
                               res.returncode, res.stdout + res.stderr)
        st.interfaces = []
        tried.add(st.slot)
    for n in st.nodes:
        run(["ip", "addr", "add", f"{st.layout(n).ip}/32", "dev", addr_if], timeout=10)
    run(["ip", "link", "set", addr_if, "up"], timeout=10)
    for n in st.nodes:
        ip = st.layout(n).ip
        for port in (KUBELET_PORT, KUBELET_HEALTHZ_PORT):
            # Fails too when something listens on the port on all addresses.
            if port_in_use(ip, port):
                raise InvalidInput(f"port {port} on {ip} is in use (a kubelet listening on "
                                   f"all addresses?): node {n.name}'s kubelet needs it")
    # Pods of different nodes talk through the host, which routes between the node
    # bridges: that needs forwarding, and an ACCEPT where a FORWARD policy drops (Docker
    # sets DROP when it runs on the same host).
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    if shutil.which("iptables"):
        pods = f"{slot_network(st.slot)[1]}.0.0/16"
        st.firewall = [["-s", pods, "-j", "ACCEPT"], ["-d", pods, "-j", "ACCEPT"]]
        st.save()
        for rule in st.firewall:
            run(["iptables", "-w", "5", "-I", "FORWARD", *rule], timeout=30)


def delete(st: ClusterState) -> None:
    cleanup.delete_links(st.interfaces)
    delete_forward_rules(st.firewall)


def delete_forward_rules(rules: list[list[str]]) -> None:
    if not rules or shutil.which("iptables") is None:
        return
    for rule in rules:
        # -D removes one copy per call: repeat until none is left (idempotent down).
        for _ in range(10):
            if run(["iptables", "-w", "5", "-D", "FORWARD", *rule], timeout=30,
                   check=False).returncode != 0:
                break
