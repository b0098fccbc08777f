"""The DRA drivers fakegpu speaks as, by name: the one place their names are spelled.

Ground floor (imports nothing of fakegpu): the plugin, the cluster providers, the fleet, the
conformance kit and the suites all ask here what a driver is called and whether it is
NVIDIA-compatible, so the answer cannot differ between them.

- ``FAKEGPU`` / ``NVIDIA``: the GPU drivers fakegpu's plugin publishes as;
- ``CHOICES``: the ``--driver`` choice keys (``fakegpu``, ``nvidia``) and the driver of each;
- ``NIC``: the NIC driver (``fakegpu nic run``), one name in both GPU driver modes;
  ``DRANET``: the same plugin under DRANET's name, publishing DRANET's attribute names;
  ``NIC_CHOICES``: the clusters' ``--nic-driver`` keys (``fakegpu``, ``dranet``, ``none``);
- the names derived from a GPU driver's domain (``gpu.X`` -> ``X``): the MIG DeviceClass
  ``mig.X``, the opaque configs' ``resource.X/v1beta1``, the ComputeDomain driver
  ``compute-domain.X``.
"""

from __future__ import annotations

FAKEGPU = "gpu.fakegpu.dev"
NVIDIA = "gpu.nvidia.com"  # NVIDIA's k8s-dra-driver-gpu: its manifests select this name
DEFAULT = FAKEGPU
NIC = "nic.fakegpu.dev"  # the NIC driver (fakegpu/nic), beside either GPU driver
DRANET = "dra.net"  # kubernetes-sigs/dranet's driver name: its manifests select this name

FAKEGPU_KEY = "fakegpu"
NVIDIA_KEY = "nvidia"
# `--driver` (cluster up, fleet, the pytest plugin's --fakegpu-driver): key -> driver name.
CHOICES: dict[str, str] = {FAKEGPU_KEY: FAKEGPU, NVIDIA_KEY: NVIDIA}
DEFAULT_KEY = FAKEGPU_KEY

# `--nic-driver` (cluster up, the pytest plugin's --fakegpu-nic-driver): key -> the NIC plugin's
# driver name; "none" runs no NIC plugin (a cluster whose suites need no NICs: fewer processes).
NIC_CHOICES: dict[str, str] = {FAKEGPU_KEY: NIC, "dranet": DRANET, "none": ""}
NIC_DEFAULT_KEY = FAKEGPU_KEY

CONFIG_VERSION = "v1beta1"  # of the opaque sharing configs, fakegpu's and NVIDIA's alike
COMPUTE_DOMAIN_PREFIX = "compute-domain."


def is_nvidia(driver: str) -> bool:
    """Whether ``driver`` is NVIDIA's name: the plugin then acts as NVIDIA's driver (its
    DeviceClasses, its config group, its device attributes), so NVIDIA's manifests work."""
    return driver == NVIDIA


def is_dranet(driver: str) -> bool:
    """Whether ``driver`` is DRANET's name: the NIC plugin then publishes DRANET's device names
    and ``dra.net/*`` attributes, so selectors written for DRANET match fakegpu's NICs."""
    return driver == DRANET


def nic_by_key(key: str) -> str:
    """The NIC driver name of a ``--nic-driver`` choice key (``dranet`` -> ``dra.net``; ``none``
    -> "": no NIC plugin)."""
    try:
        return NIC_CHOICES[key]
    except KeyError:
        raise ValueError(f"unknown NIC driver choice {key!r} (expected one of "
                         f"{', '.join(NIC_CHOICES)})") from None


def is_nvidia_key(key: str) -> bool:
    """Whether the ``--driver`` choice ``key`` is the NVIDIA-compatible one."""
    return key == NVIDIA_KEY


def by_key(key: str) -> str:
    """The driver name of a ``--driver`` choice key (``nvidia`` -> ``gpu.nvidia.com``)."""
    try:
        return CHOICES[key]
    except KeyError:
        raise ValueError(f"unknown driver choice {key!r} (expected one of "
                         f"{', '.join(CHOICES)})") from None


def key_of(driver: str) -> str:
    """The ``--driver`` choice key of a driver name: ``nvidia`` for NVIDIA's name, else
    ``fakegpu`` (any other name is fakegpu's own plugin under that name)."""
    return NVIDIA_KEY if is_nvidia(driver) else FAKEGPU_KEY


def domain(driver: str) -> str:
    """The domain of a GPU driver name: ``gpu.nvidia.com`` -> ``nvidia.com``, any ``gpu.X`` -> X."""
    return driver.removeprefix("gpu.")


def mig_class(driver: str) -> str:
    """The MIG DeviceClass beside a GPU driver: ``mig.fakegpu.dev``, ``mig.nvidia.com``."""
    return f"mig.{domain(driver)}"


def config_api_version(driver: str) -> str:
    """The opaque configs' apiVersion the plugin reads: NVIDIA's with NVIDIA's driver name
    (``resource.nvidia.com/v1beta1``), else fakegpu's own (``resource.fakegpu.dev/v1beta1``)."""
    return f"resource.{domain(NVIDIA if is_nvidia(driver) else FAKEGPU)}/{CONFIG_VERSION}"


def compute_domain_driver(gpu_driver: str) -> str:
    """The ComputeDomain driver beside a GPU driver: ``compute-domain.nvidia.com``."""
    return f"{COMPUTE_DOMAIN_PREFIX}{domain(gpu_driver)}"
