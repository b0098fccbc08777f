"""The capabilities file: what a driver declares it supports, and how a pod sees its devices.

```yaml
driver: gpu.example.com          # optional; must equal --driver when given
deviceClass: gpu.example.com     # optional; the default of --device-class
supports:                        # capability -> true/false (or its settings)
  slices: true
  nodeOwnedSlices: true
  sliceWriteScope: {serviceAccount: driver-namespace/driver-sa}
  prepare: true
  sharedClaims: true
  deviceStatus: true
  prioritizedList: true
  adminAccess: true
  deviceTaints: true
podSees:                         # optional: how a container sees its devices
  env: NVIDIA_VISIBLE_DEVICES    # an environment variable listing them
  attribute: uuid                # the device attribute each entry is
  separator: ","
```

or, for a driver whose containers get no such variable (NVIDIA's own plugin), a command run in
the container whose non-empty output lines are the entries:

```yaml
podSees:
  command: [nvidia-smi, --query-gpu=uuid, "--format=csv,noheader"]  # quoted: a comma splits
  attribute: uuid
```

Without a file the core every DRA driver has is declared (``slices``, ``prepare``,
``sharedClaims``) and nothing else. Bad input is one line naming the field (exit code 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu import drivers
from fakegpu.errors import InvalidInput, printable
from fakegpu.fsutil import read_input
from fakegpu.topology.yamlsafe import YamlRejected, read_yaml

from .checks import CAPABILITIES

DEFAULT_SUPPORTS = ("slices", "prepare", "sharedClaims")
MAX_BYTES = 64 * 1024  # a capabilities file is some 20 lines
_TOP = ("driver", "deviceClass", "supports", "podSees")


@dataclass(frozen=True)
class PodSees:
    """How a container sees its devices: an environment variable listing them (``env``), or
    the output lines of a command run in it (``command``); each entry is ``attribute`` of a
    device."""

    attribute: str
    env: str = ""
    separator: str = ","
    command: tuple[str, ...] = ()

    def devices(self, env: Mapping[str, str]) -> list[str] | None:
        """The entries of the variable in ``env`` (None when the variable is absent)."""
        if self.env not in env:
            return None
        return [v for v in env[self.env].split(self.separator) if v]

    @staticmethod
    def output_devices(stdout: str) -> list[str]:
        """The entries a ``command`` printed: its non-empty lines, stripped."""
        return [line.strip() for line in stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class Capabilities:
    supports: dict[str, Any] = field(default_factory=dict)  # declared capabilities only
    driver: str | None = None
    device_class: str | None = None
    pod_sees: PodSees | None = None
    source: str = "(given in code)"

    def declared(self, capability: str) -> bool:
        return bool(self.supports.get(capability))

    def setting(self, capability: str, key: str) -> str | None:
        value = self.supports.get(capability)
        if isinstance(value, Mapping) and isinstance(value.get(key), str):
            return str(value[key])
        return None


def default() -> Capabilities:
    return Capabilities(supports={c: True for c in DEFAULT_SUPPORTS},
                        source="the default capabilities (no file given)")


def parse(doc: Any, where: str) -> Capabilities:
    if not isinstance(doc, Mapping):
        raise InvalidInput(f"{where}: expected a mapping with {', '.join(_TOP)}")
    unknown = sorted(set(doc) - set(_TOP))
    if unknown:
        raise InvalidInput(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(_TOP)})")
    for key in ("driver", "deviceClass"):
        if key in doc and not isinstance(doc[key], str):
            raise InvalidInput(f"{where}: {key}: expected a string")
    supports_doc = doc.get("supports") or {}
    if not isinstance(supports_doc, Mapping):
        raise InvalidInput(f"{where}: supports: expected a mapping of capability to true/false")
    supports: dict[str, Any] = {}
    for name, value in supports_doc.items():
        if name not in CAPABILITIES:
            raise InvalidInput(f"{where}: supports.{name}: unknown capability (known: "
                               f"{', '.join(CAPABILITIES)})")
        if not isinstance(value, bool | Mapping):
            raise InvalidInput(f"{where}: supports.{name}: expected true, false or a mapping")
        if value:
            supports[str(name)] = dict(value) if isinstance(value, Mapping) else True
    scope = supports.get("sliceWriteScope")
    if isinstance(scope, dict):
        account = scope.get("serviceAccount")
        if not isinstance(account, str) or account.count("/") != 1:
            raise InvalidInput(f"{where}: supports.sliceWriteScope.serviceAccount: expected "
                               "NAMESPACE/NAME")
    elif scope:
        raise InvalidInput(f"{where}: supports.sliceWriteScope: expected "
                           "{serviceAccount: NAMESPACE/NAME} (the driver's identity)")
    return Capabilities(supports=supports, driver=doc.get("driver"),
                        device_class=doc.get("deviceClass"),
                        pod_sees=_pod_sees(doc.get("podSees"), where), source=where)


MAX_COMMAND_WORDS = 32


def _pod_sees(doc: Any, where: str) -> PodSees | None:
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise InvalidInput(f"{where}: podSees: expected a mapping with env or command, and "
                           "attribute")
    unknown = sorted(set(doc) - {"env", "command", "attribute", "separator"})
    if unknown:
        raise InvalidInput(f"{where}: podSees: unknown field {unknown[0]!r} (known: env, "
                           "command, attribute, separator)")
    if not isinstance(doc.get("attribute"), str) or not doc["attribute"]:
        raise InvalidInput(f"{where}: podSees.attribute: expected a non-empty string")
    if ("env" in doc) == ("command" in doc):
        raise InvalidInput(f"{where}: podSees: expected either env (a variable listing the "
                           "devices) or command (one printing one per line), not both")
    if "command" in doc:
        command = doc["command"]
        if (not isinstance(command, list) or not 0 < len(command) <= MAX_COMMAND_WORDS
                or not all(isinstance(w, str) and w for w in command)):
            raise InvalidInput(f"{where}: podSees.command: expected a list of 1 to "
                               f"{MAX_COMMAND_WORDS} non-empty strings (argv)")
        return PodSees(attribute=doc["attribute"], command=tuple(command))
    if not isinstance(doc.get("env"), str) or not doc["env"]:
        raise InvalidInput(f"{where}: podSees.env: expected a non-empty string")
    separator = doc.get("separator", ",")
    if not isinstance(separator, str) or not separator:
        raise InvalidInput(f"{where}: podSees.separator: expected a non-empty string")
    return PodSees(env=doc["env"], attribute=doc["attribute"], separator=separator)


def load(path: Path) -> Capabilities:
    """The capabilities file at ``path``, read like every untrusted input: a bounded read of
    a regular file (never a FIFO's wait or /dev/zero's endless bytes), then fakegpu's guarded
    YAML reader (UTF-8, no tags, text keys, bounded depth and aliases)."""
    where = printable(str(path))
    data = read_input(path, MAX_BYTES, "capabilities file (YAML)")
    try:
        doc = read_yaml(data)
    except YamlRejected as err:
        raise InvalidInput(err.problem.line(where)) from None
    return parse(doc, where)


def packaged(driver: str) -> Capabilities:
    """What fakegpu's own plugin declares when it runs as ``driver``."""
    from importlib import resources

    name = "nvidia.yaml" if drivers.is_nvidia(driver) else "fakegpu.yaml"
    ref = resources.files("fakegpu.conformance").joinpath("capabilities", name)
    doc = read_yaml(ref.read_bytes())
    doc["driver"] = driver
    doc["deviceClass"] = driver
    return parse(doc, f"fakegpu/conformance/capabilities/{name}")
