"""Every name the ComputeDomain pieces share, per mode.

NVIDIA-compatible mode uses NVIDIA's own names (group ``resource.nvidia.com``, driver
``compute-domain.nvidia.com``, label and finalizer ``resource.nvidia.com/computeDomain``), so
users' ComputeDomain manifests apply unchanged; fakegpu mode puts the same shapes under
fakegpu's domain (``resource.fakegpu.dev``, ``compute-domain.fakegpu.dev``). The domain is the
GPU driver's name without ``gpu.``, the rule the MIG class follows too.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu import drivers

VERSION = "v1beta1"
KIND = "ComputeDomain"
PLURAL = "computedomains"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"
READY, NOT_READY = "Ready", "NotReady"
ALLOCATION_MODES = ("Single", "All")
CHANNEL, DAEMON = "channel", "daemon"
DAEMON_PORT = 50000  # where each IMEX daemon pod answers its peers
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
# Env the compute-domain plugin gives a container with a channel (the bandwidth worker reads it).
ENV_DOMAIN = "FAKEGPU_COMPUTE_DOMAIN"
ENV_CHANNEL = "FAKEGPU_IMEX_CHANNEL"
# ...and where its node's IMEX daemon answers (the daemon pod's endpoint), HOST:PORT.
ENV_DAEMON = "FAKEGPU_IMEX_DAEMON"


@dataclass(frozen=True)
class Names:
    domain: str  # nvidia.com, fakegpu.dev

    @property
    def group(self) -> str:
        return f"resource.{self.domain}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{VERSION}"

    @property
    def driver(self) -> str:
        return f"{drivers.COMPUTE_DOMAIN_PREFIX}{self.domain}"

    @property
    def label_key(self) -> str:
        """On nodes (where a domain's workloads run), templates and daemon sets: the UID."""
        return f"{self.group}/computeDomain"

    @property
    def finalizer(self) -> str:
        return self.label_key  # NVIDIA uses the label key as its finalizer too

    @property
    def channel_class(self) -> str:
        return f"compute-domain-default-channel.{self.domain}"

    @property
    def daemon_class(self) -> str:
        return f"compute-domain-daemon.{self.domain}"


def for_gpu_driver(gpu_driver: str) -> Names:
    """gpu.nvidia.com -> nvidia.com names; gpu.fakegpu.dev (or any gpu.X) -> X."""
    return Names(drivers.domain(gpu_driver))


def for_cd_driver(cd_driver: str) -> Names | None:
    """The names of a compute-domain driver name, or None when it is not one."""
    prefix = drivers.COMPUTE_DOMAIN_PREFIX
    if not cd_driver.startswith(prefix) or cd_driver == prefix:
        return None
    return Names(cd_driver.removeprefix(prefix))


def daemon_endpoint(ip: str, port: int = DAEMON_PORT) -> str:
    """``ip:port``, an IPv6 address in brackets (``[fd00::5]:50000``)."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def daemonset_name(uid: str) -> str:
    return f"imex-{uid}"


def daemon_template_name(uid: str) -> str:
    return f"imex-{uid}-daemon"
