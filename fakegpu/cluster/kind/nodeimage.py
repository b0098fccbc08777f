"""``fakegpu kind node-image``: a kind node image assembled with no registry.

Where a registry answers, kind's own kindest/node image is the better choice and is used (see
``provider.choose_node_image``). Here nothing can be pulled, so the image is put together from
what this machine can make:

1. the Debian ``node`` rootfs (debootstrap, systemd) imported into Docker (``rootfs``);
2. the cached binaries the embedded cluster runs (``binaries.ensure``: Kubernetes, containerd,
   runc, CNI plugins, crictl, etcd) plus kubeadm and kube-proxy (``tools.node_kubernetes``);
3. the node's own files (``nodefiles``: entrypoint, systemd units, containerd config with CDI on
   and runc behind the capability wrapper);
4. the images kubeadm runs (kube-apiserver, -controller-manager, -scheduler, kube-proxy, etcd,
   pause) as OCI archives made by ``oci`` from the same binaries, named exactly as
   ``kubeadm config images list`` says, imported into the image's containerd (not unpacked:
   containerd unpacks on first use, on the node's /var volume);
5. ``docker commit`` with kind's entrypoint contract.

CoreDNS is not built (it is a large build and nothing in the suites resolves names); the
provider scales its Deployment to zero so no pod waits on an image that cannot be pulled.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from rich.console import Console

from fakegpu import paths
from fakegpu.cluster import nodeconfig
from fakegpu.cluster.artifacts import binaries, images, oci
from fakegpu.cluster.kind import nodefiles, rootfs, tools
from fakegpu.cluster.process import CommandError, run
from fakegpu.errors import FakegpuError
from fakegpu.fsutil import atomic_write

NODE_REPO = "fakegpu.local/kind-node"
KINDEST_NODE = "kindest/node"
# Bump when what goes into the image changes in a way the inputs' hashes do not show.
NODE_FORMAT = "1"
COMPONENT_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
                    "etcd", "pause")


@dataclass(frozen=True)
class NodeImage:
    ref: str
    k8s_version: str
    seconds: float  # time spent assembling (0 when it was already there)


def images_dir() -> Path:
    return paths.cache_dir() / "kind" / "images"


def kubeadm_images(kubeadm: Path, version: str) -> dict[str, str]:
    """kubeadm's image names for ``version`` by component (``kube-apiserver`` -> full ref)."""
    out = run([str(kubeadm), "config", "images", "list", "--kubernetes-version", f"v{version}"],
              timeout=60).stdout
    refs: dict[str, str] = {}
    for line in out.split():
        name = line.rsplit("/", 1)[-1].split(":", 1)[0]
        refs[name] = line
    return refs


def _minimal_layer() -> bytes:
    """What the static Go binaries need of a root file system (a distroless-like layer)."""
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    entries = [
        oci.file("etc/passwd", b"root:x:0:0:root:/root:/sbin/nologin\n"
                               b"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"),
        oci.file("etc/group", b"root:x:0:\nnobody:x:65534:\n"),
        oci.file("etc/nsswitch.conf", b"hosts: files dns\n"),
        oci.directory("tmp", 0o1777),
        oci.directory("var/lib"),
        oci.directory("root", 0o700),
    ]
    if ca.is_file():
        entries.append(oci.file("etc/ssl/certs/ca-certificates.crt", ca.read_bytes()))
    return oci.layer_tar(entries)


def _binary_layer(name: str, path: Path) -> bytes:
    return oci.layer_tar([oci.file(f"usr/local/bin/{name}", path.read_bytes(), 0o755)])


def component_archives(version: str, refs: dict[str, str], bins: binaries.Binaries,
                       node_bin: Path, console: Console) -> list[Path]:
    """OCI archives of the images kubeadm runs, cached by content."""
    out = images_dir()
    out.mkdir(parents=True, exist_ok=True)
    sources = {
        "kube-apiserver": bins.kube_apiserver, "kube-controller-manager":
            bins.kube_controller_manager, "kube-scheduler": bins.kube_scheduler,
        "kube-proxy": node_bin / "kube-proxy", "etcd": bins.etcd,
    }
    arch = images.host_arch()
    archives: list[Path] = []
    for name, binary in sources.items():
        ref = refs[name]
        # kube-proxy programs iptables: it gets the Debian base (iptables, conntrack) below it.
        base = rootfs.ensure_tar(rootfs.BASE, console) if name == "kube-proxy" else None
        key = hashlib.sha256(f"{NODE_FORMAT} {ref} {arch}".encode())
        key.update(json.dumps(_stat(binary)).encode())
        if base is not None:
            key.update(base.name.encode())
        dest = out / f"{name}-{key.hexdigest()[:16]}.tar"
        if not dest.is_file():
            console.print(f"image {ref} (from {binary})")
            layers = [base.read_bytes() if base is not None else _minimal_layer(),
                      _binary_layer(name, binary)]
            cfg = oci.ImageConfig(entrypoint=(f"/usr/local/bin/{name}",)) if name == "etcd" \
                else oci.ImageConfig()
            atomic_write(dest, oci.build_archive(ref, layers, cfg, arch=arch))
        archives.append(dest)
    return archives


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, int(st.st_mtime)]


def node_files(version: str, bins: binaries.Binaries, node_bin: Path, pause: str) -> bytes:
    """A tar of everything the node image adds to the Debian rootfs."""
    # The same runc binary runs here and in the node: ask it here what it supports.
    wrapper = nodeconfig.wrapper_text(nodefiles.REAL_RUNC_PATH,
                                      seccomp=nodeconfig.seccomp_supported(bins.runc))
    entries = [
        oci.file("usr/local/bin/entrypoint", nodefiles.ENTRYPOINT.encode(), 0o755),
        oci.file(nodefiles.WRAPPER_PATH.lstrip("/"), wrapper.encode(), 0o755),
        oci.file("etc/systemd/system/kubelet.slice", nodefiles.KUBELET_SLICE.encode()),
        oci.file("etc/systemd/system/kubelet.service", nodefiles.KUBELET_SERVICE.encode()),
        oci.file("etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
                 nodefiles.KUBELET_KUBEADM_DROPIN.encode()),
        oci.file("etc/systemd/system/containerd.service", nodefiles.CONTAINERD_SERVICE.encode()),
        oci.symlink("etc/systemd/system/multi-user.target.wants/kubelet.service",
                    "/etc/systemd/system/kubelet.service"),
        oci.symlink("etc/systemd/system/multi-user.target.wants/containerd.service",
                    "/etc/systemd/system/containerd.service"),
        oci.file("etc/containerd/config.toml", nodefiles.containerd_config(pause).encode()),
        oci.file("etc/crictl.yaml", nodefiles.CRICTL_YAML.encode()),
        oci.file("etc/sysctl.d/10-fakegpu.conf", nodefiles.SYSCTL.encode()),
        oci.directory("etc/cni/net.d"),
        oci.directory("etc/cdi"),
        oci.file("kind/version", f"v{version}\n".encode()),
        oci.file("kind/manifests/default-storage.yaml", nodefiles.DEFAULT_STORAGE.encode()),
    ]
    programs = {
        "usr/bin/kubelet": bins.kubelet, "usr/bin/kubectl": bins.kubectl,
        "usr/bin/kubeadm": node_bin / "kubeadm",
        "usr/local/bin/containerd": bins.containerd,
        "usr/local/bin/containerd-shim-runc-v2": bins.containerd_shim_runc_v2,
        "usr/local/bin/ctr": bins.ctr, "usr/local/bin/crictl": bins.crictl,
        nodefiles.REAL_RUNC_PATH.lstrip("/"): bins.runc,
    }
    entries += [oci.file(dest, src.read_bytes(), 0o755) for dest, src in programs.items()]
    entries += [oci.file(f"opt/cni/bin/{p.name}", p.read_bytes(), 0o755)
                for p in sorted(bins.cni_bin_dir.iterdir()) if p.is_file()]
    return oci.layer_tar(entries)


def image_ref(version: str, digest: str) -> str:
    return f"{NODE_REPO}:v{version}-{digest}"


def assemble(docker: Path, k8s_version: str | None, console: Console | None = None) -> NodeImage:
    """Build (or find) the node image for Kubernetes ``k8s_version``."""
    console = console or Console(stderr=True)
    version = binaries.resolve_version(k8s_version)
    started = time.monotonic()
    # One assembly at a time across processes (xdist workers bringing up two kind clusters,
    # cold): the second finds the first's image instead of a second debootstrap beside it.
    lock = paths.cache_dir() / "kind" / "node-image.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        return _assemble(docker, version, console, started)


def _assemble(docker: Path, version: str, console: Console, started: float) -> NodeImage:
    base = rootfs.ensure_image(docker, rootfs.NODE, console)
    bins = binaries.ensure(version, console=console)
    node_bin = tools.ensure(tools.node_kubernetes(version), console)
    refs = kubeadm_images(node_bin / "kubeadm", version)
    missing = [c for c in COMPONENT_IMAGES if c not in refs]
    if missing:
        raise FakegpuError(f"kubeadm lists no image for {', '.join(missing)}")
    imgs = images.ensure_images(console=console)
    archives = [*component_archives(version, refs, bins, node_bin, console),
                imgs.pause_archive, imgs.workload_archive]
    layer = node_files(version, bins, node_bin, refs["pause"])
    digest = hashlib.sha256(f"{NODE_FORMAT} {base}".encode())
    digest.update(hashlib.sha256(layer).digest())
    for a in archives:
        digest.update(a.name.encode())
    ref = image_ref(version, digest.hexdigest()[:12])
    if rootfs.image_present(docker, ref):
        return NodeImage(ref, version, 0.0)
    console.print(f"assembling kind node image {ref}")
    _commit(docker, base, layer, archives, refs["pause"], images.PAUSE_IMAGE, ref)
    # Earlier builds for this version are superseded; one still used by a cluster's containers
    # is refused by Docker and stays.
    listed = run([str(docker), "images", "--format", "{{.Repository}}:{{.Tag}}", NODE_REPO],
                 check=False).stdout.split()
    stale = [r for r in listed if r != ref and r.startswith(f"{NODE_REPO}:v{version}-")]
    if stale:
        run([str(docker), "rmi", *stale], check=False)
    return NodeImage(ref, version, time.monotonic() - started)


def _commit(docker: Path, base: str, layer: bytes, archives: list[Path], pause_ref: str,
            built_pause: str, ref: str) -> None:
    name = f"fakegpu-node-build-{os.getpid()}"
    d = str(docker)
    mounts = sorted({str(a.parent) for a in archives})
    vol_args = [arg for i, m in enumerate(mounts) for arg in ("-v", f"{m}:/fakegpu-in/{i}:ro")]
    run([d, "create", "--name", name, "--privileged", "--entrypoint", "sleep", *vol_args,
         base, "infinity"], timeout=120)
    try:
        subprocess.run([d, "cp", "-", f"{name}:/"], input=layer, check=True,
                       capture_output=True, timeout=600)
        run([d, "start", name], timeout=120)
        # A throwaway containerd only to fill the content store of the image's own one.
        run([d, "exec", "-d", name, "sh", "-c",
             "/usr/local/bin/containerd >/tmp/containerd.log 2>&1"], timeout=60)
        run([d, "exec", name, "sh", "-c",
             "for i in $(seq 60); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; "
             "cat /tmp/containerd.log; exit 1"], timeout=90)
        for a in archives:
            inside = f"/fakegpu-in/{mounts.index(str(a.parent))}/{a.name}"
            run([d, "exec", name, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack",
                 "--all-platforms", inside], timeout=600)
        if pause_ref != built_pause:  # kubeadm of an older minor names another pause tag
            run([d, "exec", name, "ctr", "-n", "k8s.io", "images", "tag", built_pause,
                 pause_ref], timeout=60)
        listed = run([d, "exec", name, "ctr", "-n", "k8s.io", "images", "ls", "-q"],
                     timeout=60).stdout.split()
        for a in archives:
            with tarfile.open(a) as tar:
                member = tar.extractfile("index.json")
                assert member is not None
                want = json.load(member)["manifests"][0]["annotations"][oci.ANNOTATION_IMAGE_NAME]
            if want not in listed:
                raise FakegpuError(f"node image build: {want} missing after import ({listed})")
        run([d, "exec", name, "sh", "-c", "pkill containerd; sleep 1; rm -rf /tmp/* "
             "/var/lib/containerd/io.containerd.runtime.v2.task /run/containerd"], timeout=60,
            check=False)
        run([d, "stop", "-t", "5", name], timeout=60)
        run([d, "commit",
             "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
             # No STOPSIGNAL: Docker 20.10's commit refuses it, and kind removes nodes with
             # `docker rm -f`, never a graceful stop.
             "--change", "CMD []", "--change", "ENV container=docker",
             name, ref], timeout=900)
    except (CommandError, subprocess.CalledProcessError) as err:
        detail = err.stderr.decode(errors="replace") if isinstance(
            err, subprocess.CalledProcessError) and err.stderr else str(err)
        raise FakegpuError(f"assembling the kind node image failed: {detail}") from err
    finally:
        subprocess.run([d, "rm", "-f", name], capture_output=True, check=False)
