"""A real Kubernetes control plane as host processes: etcd, kube-apiserver, and optionally
kube-controller-manager and kube-scheduler.

Usable alone (integration tests that only need a real apiserver)::

    with ControlPlane(tmp_path / "cp") as cp:
        run_against(cp.kubeconfig)

Ports are chosen free at start. A start that fails stops what it started before re-raising,
and the error carries the failing component's log tail.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from fakegpu.cluster import featuregates
from fakegpu.cluster.embedded.pki import CertificateAuthority, CertPair, service_account_keypair
from fakegpu.cluster.kubeconfig import write_kubeconfig
from fakegpu.cluster.process import (
    ProcessRecord,
    WaitPolicy,
    spawn,
    terminate,
    wait_until,
)
from fakegpu.kube import api as kubeapi

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the "kubernetes" Service
LOCALHOST = "127.0.0.1"


class BinaryPaths(Protocol):
    """What the control plane needs of ``fakegpu.cluster.artifacts.binaries.Binaries``."""

    @property
    def k8s_version(self) -> str: ...
    @property
    def kube_apiserver(self) -> Path: ...
    @property
    def kube_controller_manager(self) -> Path: ...
    @property
    def kube_scheduler(self) -> Path: ...
    @property
    def kubectl(self) -> Path: ...
    @property
    def etcd(self) -> Path: ...


def free_port(host: str = LOCALHOST) -> int:
    """A port nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class Ports:
    etcd_client: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    controller_manager: int = 0
    scheduler: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class ControlPlaneCerts:
    ca: CertificateAuthority
    apiserver: CertPair
    kubelet_client: CertPair  # the apiserver's identity towards kubelets
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    service_account: CertPair

    @classmethod
    def create(cls, pki_dir: Path) -> ControlPlaneCerts:
        ca = CertificateAuthority.create(pki_dir)
        return cls(
            ca=ca,
            apiserver=ca.issue(
                "apiserver", "kube-apiserver", server=True,
                dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local"),
                ips=(LOCALHOST, SERVICE_IP),
            ),
            kubelet_client=ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                    orgs=("system:masters",), client=True),
            admin=ca.issue("admin", "kubernetes-admin", orgs=("system:masters",), client=True),
            controller_manager=ca.issue("controller-manager", "system:kube-controller-manager",
                                        client=True),
            scheduler=ca.issue("scheduler", "system:kube-scheduler", client=True),
            service_account=service_account_keypair(pki_dir),
        )

    @classmethod
    def load(cls, pki_dir: Path) -> ControlPlaneCerts:
        """The certificates ``create`` wrote into ``pki_dir`` (a running cluster's)."""
        ca = CertificateAuthority.load(pki_dir)

        def pair(name: str) -> CertPair:
            return CertPair(pki_dir / f"{name}.crt", pki_dir / f"{name}.key")

        return cls(ca=ca, apiserver=pair("apiserver"),
                   kubelet_client=pair("apiserver-kubelet-client"), admin=pair("admin"),
                   controller_manager=pair("controller-manager"), scheduler=pair("scheduler"),
                   service_account=CertPair(pki_dir / "sa.pub", pki_dir / "sa.key"))


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager + scheduler) under ``workdir``."""

    workdir: Path
    binaries: BinaryPaths | None = None
    controllers: bool = True  # also run kube-controller-manager and kube-scheduler
    policy: WaitPolicy = field(default_factory=WaitPolicy)
    cluster_name: str = "fakegpu"
    gates: dict[str, bool] | None = None  # None: every DRA gate of the binaries' version
    runtime_config: dict[str, bool] | None = None
    ports: Ports = field(default_factory=Ports)
    processes: list[ProcessRecord] = field(default_factory=list)
    certs: ControlPlaneCerts | None = None

    # --- layout -------------------------------------------------------------------------------

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (system:masters)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOCALHOST}:{self.ports.apiserver}"

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component in order; on any failure stop what started, then re-raise."""
        if self.binaries is None:
            self.binaries = _ensure_binaries()
        try:
            self._prepare()
            self._start_etcd()
            self._start_apiserver()
            if self.controllers:
                self._start_controller_manager()
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop components in reverse start order. Safe to call twice."""
        for rec in reversed(self.processes):
            terminate(rec)
        self.processes.clear()

    # Replaced by ``restart_on``, in this order; etcd keeps running (the cluster's data).
    KUBERNETES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

    def restart_on(self, binaries: BinaryPaths) -> None:
        """Replace the running apiserver, controller-manager and scheduler by those of
        ``binaries``, one at a time and on the same ports, each with its own minor's gates and
        API versions (a control-plane upgrade or downgrade; etcd and its data stay).

        ``processes``, ``ports`` and ``certs`` describe the running control plane (a cluster's
        state); on return ``processes`` holds the new records in start order.
        """
        minor = featuregates.parse_minor(binaries.k8s_version)
        self.binaries = binaries
        self.gates = featuregates.dra_gates(minor)
        self.runtime_config = featuregates.runtime_config(minor)
        starts = {"kube-apiserver": self._start_apiserver,
                  "kube-controller-manager": self._start_controller_manager,
                  "kube-scheduler": self._start_scheduler}
        for name in self.KUBERNETES:
            old = next((r for r in self.processes if r.name == name), None)
            if old is not None:
                terminate(old)
                self.processes.remove(old)
            starts[name]()

    # --- steps --------------------------------------------------------------------------------

    def _bins(self) -> BinaryPaths:
        assert self.binaries is not None
        return self.binaries

    def _prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        minor = featuregates.parse_minor(self._bins().k8s_version)
        if self.gates is None:
            self.gates = featuregates.dra_gates(minor)
        if self.runtime_config is None:
            self.runtime_config = featuregates.runtime_config(minor)
        if self.certs is None:
            self.certs = ControlPlaneCerts.create(self.pki_dir)
        self.ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
        write_kubeconfig(self.kubeconfig, server=self.server, ca=self.certs.ca.cert_path,
                         cert=self.certs.admin.cert, key=self.certs.admin.key,
                         cluster=self.cluster_name, user="admin")

    def _spawn(self, name: str, argv: list[str]) -> ProcessRecord:
        rec = spawn(name, argv, self.log_dir / f"{name}.log")
        self.processes.append(rec)
        return rec

    def _start_etcd(self) -> None:
        p = self.ports
        client = f"http://{LOCALHOST}:{p.etcd_client}"
        peer = f"http://{LOCALHOST}:{p.etcd_peer}"
        rec = self._spawn("etcd", [
            str(self._bins().etcd),
            "--name=fakegpu",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=fakegpu={peer}",
            "--initial-cluster-state=new",
            # A throw-away test cluster: fsync only slows every write on a busy disk.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ])
        wait_until("etcd /health", lambda: _etcd_healthy(client), self.policy, watch=[rec])

    def _start_apiserver(self) -> None:
        c = self._certs()
        assert self.gates is not None and self.runtime_config is not None
        args = [
            str(self._bins().kube_apiserver),
            f"--etcd-servers=http://{LOCALHOST}:{self.ports.etcd_client}",
            f"--bind-address={LOCALHOST}",
            f"--advertise-address={LOCALHOST}",
            f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={self.pki_dir}",
            f"--tls-cert-file={c.apiserver.cert}",
            f"--tls-private-key-file={c.apiserver.key}",
            f"--client-ca-file={c.ca.cert_path}",
            f"--kubelet-client-certificate={c.kubelet_client.cert}",
            f"--kubelet-client-key={c.kubelet_client.key}",
            f"--kubelet-certificate-authority={c.ca.cert_path}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--service-account-key-file={c.service_account.cert}",
            f"--service-account-signing-key-file={c.service_account.key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # Nothing watches endpoints of the "kubernetes" Service here; keep it simple.
            "--endpoint-reconciler-type=none",
            f"--runtime-config={featuregates.format_map(self.runtime_config)}",
        ]
        if self.gates:
            args.append(f"--feature-gates={featuregates.format_map(self.gates)}")
        rec = self._spawn("kube-apiserver", args)
        # The first start creates RBAC bootstrap objects: give it more than other waits.
        wait_until("kube-apiserver /readyz", self._apiserver_ready, self.policy.scaled(1.5),
                   watch=[rec])

    def _component_kubeconfig(self, name: str, pair: CertPair, user: str) -> Path:
        return write_kubeconfig(self.workdir / f"{name}.kubeconfig", server=self.server,
                                ca=self._certs().ca.cert_path, cert=pair.cert, key=pair.key,
                                cluster=self.cluster_name, user=user)

    def _start_controller_manager(self) -> None:
        c = self._certs()
        self._start_secure_component(
            "kube-controller-manager", self._bins().kube_controller_manager,
            self.ports.controller_manager,
            self._component_kubeconfig("controller-manager", c.controller_manager,
                                       "system:kube-controller-manager"),
            self.workdir / "controller-manager",
            [
                f"--root-ca-file={c.ca.cert_path}",
                f"--service-account-private-key-file={c.service_account.key}",
                f"--cluster-signing-cert-file={c.ca.cert_path}",
                f"--cluster-signing-key-file={c.ca.key_path}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--use-service-account-credentials=true",
                "--controllers=*",
                # Notice a stopped node within seconds, not the default 50s (fault suites wait).
                "--node-monitor-grace-period=20s",
            ],
        )

    def _start_scheduler(self) -> None:
        c = self._certs()
        self._start_secure_component(
            "kube-scheduler", self._bins().kube_scheduler, self.ports.scheduler,
            self._component_kubeconfig("scheduler", c.scheduler, "system:kube-scheduler"),
            self.workdir / "scheduler", [],
        )

    def _start_secure_component(self, name: str, binary: Path, port: int, kubeconfig: Path,
                                cert_dir: Path, extra: list[str]) -> None:
        """Controller-manager and scheduler share their shape: one kubeconfig for everything,
        a serving port on localhost, no leader election, the cluster's gates; ready at /healthz."""
        assert self.gates is not None
        args = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={LOCALHOST}",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",
            "--leader-elect=false",
            *extra,
        ]
        if self.gates:
            args.append(f"--feature-gates={featuregates.format_map(self.gates)}")
        rec = self._spawn(name, args)
        wait_until(f"{name} /healthz", lambda: _https_ok(f"https://{LOCALHOST}:{port}/healthz"),
                   self.policy, watch=[rec])

    # --- checks -------------------------------------------------------------------------------

    def _certs(self) -> ControlPlaneCerts:
        assert self.certs is not None
        return self.certs

    def _apiserver_ready(self) -> bool:
        with kubeapi.session(self.kubeconfig) as api:
            return kubeapi.get(api, "/readyz", timeout=5).strip() == b"ok"

    def get_json(self, path: str, timeout: float = 10.0) -> Any:
        """GET ``path`` from the apiserver as admin and decode the JSON body."""
        with kubeapi.session(self.kubeconfig) as api:
            return kubeapi.get_json(api, path, timeout)

    def to_json(self) -> dict[str, Any]:
        return {"workdir": str(self.workdir), "ports": self.ports.to_json(),
                "server": self.server, "kubeconfig": str(self.kubeconfig),
                "gates": self.gates, "runtime_config": self.runtime_config}


def _etcd_healthy(client_url: str) -> bool:
    # etcd's own plain-HTTP health endpoint, before any API server exists.
    with urllib.request.urlopen(f"{client_url}/health", timeout=5) as r:
        return bool(json.loads(r.read()).get("health") == "true")


def _https_ok(url: str) -> bool:
    """Whether a controller's own /healthz answers 200. Not the API server (that is reached
    through fakegpu.kube): kcm and scheduler serve a self-signed certificate on their own
    port, and only whether they answer is asked."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with contextlib.closing(urllib.request.urlopen(url, timeout=5, context=ctx)) as r:
        return bool(r.status == 200)


def _ensure_binaries() -> BinaryPaths:
    # Imported here: binaries.py belongs to another concern and may build things on import-free
    # call only; importing lazily keeps `import fakegpu.cluster.embedded.controlplane` cheap.
    from fakegpu.cluster.artifacts import binaries

    result: BinaryPaths = binaries.ensure()
    return result
