"""Fuzz the DRA plugin's gRPC requests (NodePrepareResources / NodeUnprepareResources, v1 and
v1beta1) against a real plugin server on a fake NVML node. Run through ``fuzz/grpc.sh``.

Each input is either raw bytes sent as a request body (the kubelet's socket accepts anything)
or, decoded with atheris' FuzzedDataProvider, a structured request: claims with random or
mutated UIDs, namespaces and names, backed (or not) by ResourceClaims in an in-memory
apiserver whose allocations name random drivers, pools and devices, and whose status writes
sometimes fail. After every call the contract is checked; a violation raises, which atheris
reports as a crash with the input saved:

- the answer is OK (a response that parses, one entry per claim asked, each an error or
  devices) or a status the plugin documents: INVALID_ARGUMENT, or INTERNAL only for bytes that
  are not a request at all (grpc's own deserialization failure). UNKNOWN (an exception in the
  plugin) or a deadline is a finding;
- the server keeps serving (a known claim is prepared every few inputs);
- the state is sound: every record in ``claims/`` reads back, its CDI spec exists and is JSON,
  a claim answered as prepared has both, an unprepared one neither; nothing was moved aside
  as corrupt; no temp file outlives a call;
- nothing is written outside the plugin's directories (kubelet sockets, state, CDI).
"""

from __future__ import annotations

import collections
import copy
import json
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["fakegpu.plugin"]):
    from fakegpu.kubeletplugin import checkpoint, names
    from fakegpu.plugin.discovery import discover
    from fakegpu.plugin.driver import Devices, Driver, DriverConfig
    from fakegpu.kubeletplugin.server import PluginServers
    from fakegpu.kubeletplugin.sockets import socket_paths

import grpc

from fakegpu.kubeletplugin.proto import dra_v1_pb2, dra_v1beta1_pb2

DRIVER = "gpu.fakegpu.dev"
NODE = os.environ.get("FAKEGPU_FUZZ_NODE", "a100-0")  # the node whose NVML state grpc.sh set
PB = {"v1": dra_v1_pb2, "v1beta1": dra_v1beta1_pb2}
SERVICE = "/k8s.io.kubelet.pkg.apis.dra.{}.DRAPlugin/{}"
CANARY_EVERY = 25
ALLOWED_FILES = {".sock", ".lock", ".json"}


class Finding(AssertionError):
    """The plugin broke its contract on this input."""


class FuzzClaims:
    """An in-memory apiserver for ResourceClaims; status writes fail when told to."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.fail_status = 0  # HTTP status for the next status writes, 0 = succeed
        self.lock = threading.Lock()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            try:
                return copy.deepcopy(self.claims[(namespace, name)])
            except KeyError:
                raise LookupError(f"resourceclaims {name!r} not found in {namespace!r}") from None

    def replace_claim_status(self, claim: dict[str, Any]) -> None:
        with self.lock:
            if self.fail_status:
                err = RuntimeError(f"HTTP {self.fail_status} refused")
                err.status = self.fail_status  # type: ignore[attr-defined]
                raise err
            key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
            if key in self.claims:
                self.claims[key]["status"] = copy.deepcopy(claim["status"])


class Harness:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "n"
        self.state = self.root / "state"
        self.cdi = self.root / "cdi"
        self.kubelet = self.root / "k"
        inventory = discover()  # the fake libnvidia-ml.so.1 (grpc.sh points the loader at it)
        self.devices = [d.name for d in inventory.devices]
        self.store = FuzzClaims()
        cfg = DriverConfig(driver=DRIVER, node=NODE, state_dir=self.state, cdi_root=self.cdi,
                           instance="fuzz", write_status=True)
        self.driver = Driver(cfg, self.store, Devices(lambda: inventory))
        self.servers = PluginServers(self.driver, socket_paths(self.kubelet, DRIVER), workers=8)
        self.channel = grpc.insecure_channel(f"unix://{self.servers.paths.dra}")
        self.calls = 0
        self.seen: collections.Counter[str] = collections.Counter()  # outcomes, for the log
        self.canary_uid = "canary-0000"
        self.store.claims[("default", "canary")] = _claim("default", "canary", self.canary_uid,
                                                          [(DRIVER, NODE, self.devices[0])])

    def call(self, version: str, method: str, body: bytes) -> tuple[grpc.StatusCode, bytes]:
        rpc = self.channel.unary_unary(SERVICE.format(version, method))
        try:
            return grpc.StatusCode.OK, rpc(body, timeout=20)
        except grpc.RpcError as err:
            return err.code(), (err.details() or "").encode()

    def one(self, data: bytes) -> None:
        self.calls += 1
        if not data:
            return
        fdp = atheris.FuzzedDataProvider(data)
        version = "v1" if fdp.ConsumeBool() else "v1beta1"
        method = "NodePrepareResources" if fdp.ConsumeBool() else "NodeUnprepareResources"
        if fdp.ConsumeIntInRange(0, 7) == 0:
            raw = fdp.ConsumeBytes(fdp.remaining_bytes())
            self.check(version, method, raw, None)
        else:
            request = self.structured(fdp, version, method)
            self.check(version, method, request.SerializeToString(), request)
        if self.calls % CANARY_EVERY == 0:
            self.canary()
        if self.calls % 500 == 0:
            self.reset()
        if self.calls % 5000 == 0:
            print(f"outcomes after {self.calls} inputs: {dict(sorted(self.seen.items()))}",
                  file=sys.stderr, flush=True)

    def structured(self, fdp: atheris.FuzzedDataProvider, version: str, method: str) -> Any:
        pb = PB[version]
        self.store.fail_status = [0, 0, 0, 0, 409, 422, 403, 500][fdp.ConsumeIntInRange(0, 7)]
        if method == "NodePrepareResources":
            request = pb.NodePrepareResourcesRequest()
        else:
            request = pb.NodeUnprepareResourcesRequest()
        for _ in range(fdp.ConsumeIntInRange(0, 5)):
            ns, name, uid = (_name(fdp), _name(fdp), _name(fdp))
            request.claims.add(namespace=ns, name=name, uid=uid)
            if fdp.ConsumeBool():
                results = []
                for _ in range(fdp.ConsumeIntInRange(0, 3)):
                    driver = DRIVER if fdp.ConsumeIntInRange(0, 3) else _name(fdp)
                    pool = NODE if fdp.ConsumeIntInRange(0, 3) else _name(fdp)
                    device = (self.devices[fdp.ConsumeIntInRange(0, len(self.devices) - 1)]
                              if fdp.ConsumeIntInRange(0, 3) else _name(fdp))
                    results.append((driver, pool, device))
                obj = _claim(ns, name, uid if fdp.ConsumeIntInRange(0, 5) else _name(fdp),
                             results, allocated=fdp.ConsumeIntInRange(0, 5) > 0,
                             admin=fdp.ConsumeBool(), share=_name(fdp) if fdp.ConsumeBool()
                             else "")
                with self.store.lock:
                    self.store.claims[(ns, name)] = obj
        return request

    def check(self, version: str, method: str, body: bytes, request: Any) -> None:
        pb = PB[version]
        code, answer = self.call(version, method, body)
        self.seen[f"{method}:{code.name}"] += 1
        if request is None:  # raw bytes: is it a request at all?
            req_type = (pb.NodePrepareResourcesRequest if method == "NodePrepareResources"
                        else pb.NodeUnprepareResourcesRequest)
            try:
                request = req_type.FromString(body)
            except Exception:
                if code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT):
                    raise Finding(f"unparsable request answered {code}: {answer[:200]!r}") from None
                self.check_state()
                return
        uids = [c.uid for c in request.claims]
        malformed = (any(not (c.uid and c.name and c.namespace) for c in request.claims)
                     or any(names.problem(u) for u in uids) or len(set(uids)) != len(uids))
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            if not malformed:
                raise Finding(f"well-formed request refused: {answer[:300]!r}")
        elif code != grpc.StatusCode.OK:
            raise Finding(f"{method} answered {code}: {answer[:300]!r}")
        elif malformed:
            raise Finding(f"malformed request answered OK: {uids!r}")
        else:
            resp_type = (pb.NodePrepareResourcesResponse if method == "NodePrepareResources"
                         else pb.NodeUnprepareResourcesResponse)
            response = resp_type.FromString(answer)
            if set(response.claims) != set(uids):
                raise Finding(f"answered {sorted(response.claims)!r} for {uids!r}")
            for uid, entry in response.claims.items():
                self.seen[f"{method}:claim-{'error' if entry.error else 'ok'}"] += 1
                record = self.state / checkpoint.CLAIMS_DIR / f"{uid}.json"
                spec = self.cdi / f"{DRIVER.replace('.', '_')}-claim_{uid}.json"
                if method == "NodePrepareResources" and not entry.error:
                    if not entry.devices:
                        raise Finding(f"claim {uid!r} prepared with no devices")
                    if not (record.is_file() and spec.is_file()):
                        raise Finding(f"claim {uid!r} prepared but its record/spec is missing")
                if method == "NodeUnprepareResources" and not entry.error and (
                        record.exists() or spec.exists()):
                    raise Finding(f"claim {uid!r} unprepared but its record/spec remains")
        self.check_state()

    def check_state(self) -> None:
        """The plugin's directories hold only sound files, and nothing else exists."""
        if sorted(p.name for p in self.base.iterdir()) != ["n"]:
            raise Finding(f"written outside the plugin's dirs: {sorted(self.base.iterdir())}")
        records = checkpoint.Records(self.state)
        for path in self.root.rglob("*"):
            if path.is_dir():
                continue
            rel = path.relative_to(self.root)
            if path.suffix not in ALLOWED_FILES or rel.parts[0] not in ("state", "cdi", "k"):
                raise Finding(f"unexpected file {rel}")
            if rel.parts[:2] == ("state", checkpoint.CLAIMS_DIR):
                uid = path.stem
                claim = records.get(uid)
                if claim is None:
                    raise Finding(f"unreadable record {rel}")
                spec = self.cdi / claim.cdi_spec
                try:
                    json.loads(spec.read_text())
                except (OSError, ValueError) as err:
                    raise Finding(f"record {rel} without a sound spec: {err}") from err

    def canary(self) -> None:
        self.store.fail_status = 0
        request = dra_v1_pb2.NodePrepareResourcesRequest(claims=[dra_v1_pb2.Claim(
            namespace="default", name="canary", uid=self.canary_uid)])
        code, answer = self.call("v1", "NodePrepareResources", request.SerializeToString())
        if code != grpc.StatusCode.OK:
            raise Finding(f"server stopped serving: {code} {answer[:200]!r}")
        entry = dra_v1_pb2.NodePrepareResourcesResponse.FromString(answer).claims[self.canary_uid]
        if entry.error or not entry.devices:
            raise Finding(f"canary not prepared: {entry.error!r}")

    def reset(self) -> None:
        """Unprepare everything prepared so far (through the server), forget the claims."""
        uids = [p.stem for p in (self.state / checkpoint.CLAIMS_DIR).glob("*.json")]
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[
            dra_v1_pb2.Claim(namespace="x", name="x", uid=u) for u in uids])
        code, answer = self.call("v1", "NodeUnprepareResources", request.SerializeToString())
        if code != grpc.StatusCode.OK:
            raise Finding(f"unprepare of every prepared claim answered {code}: {answer!r}")
        self.check_state()
        if list((self.state / checkpoint.CLAIMS_DIR).iterdir()):
            raise Finding("records left after unpreparing every claim")
        with self.store.lock:
            canary = self.store.claims[("default", "canary")]
            self.store.claims = {("default", "canary"): canary}


# Names drawn from a small vocabulary half the time, so calls hit the same claims again
# (idempotence, unprepare of prepared claims); otherwise arbitrary text.
_VOCAB = ["default", "c1", "c2", "uid-1", "uid-2", "a.b", "gpu-0", "..", ".", "a/b", "x\x00y",
          "../../etc", "-a", "A_b", "\u00e9", " ", "x" * 260, "kube-system"]


def _name(fdp: atheris.FuzzedDataProvider) -> str:
    if fdp.ConsumeBool():
        return _VOCAB[fdp.ConsumeIntInRange(0, len(_VOCAB) - 1)]
    return str(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40)))


def _claim(ns: str, name: str, uid: str, results: list[tuple[str, str, str]],
           allocated: bool = True, admin: bool = False, share: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": ns, "name": name, "uid": uid},
                           "status": {}}
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": [
            {"request": "gpus", "driver": d, "pool": p, "device": dev,
             **({"adminAccess": True} if admin else {}), **({"shareID": share} if share else {})}
            for d, p, dev in results]}}
    return obj


def main() -> None:
    # libFuzzer ends the process with exit(): grpc.sh owns (and removes) the work dir.
    # The plugin logs every refused claim; findings are raised, not logged.
    logging.getLogger("fakegpu").setLevel(logging.CRITICAL)
    base = Path(os.environ.get("FAKEGPU_FUZZ_DIR") or tempfile.mkdtemp(prefix="fgz-"))
    harness = Harness(base / "plugin")
    atheris.Setup(sys.argv, harness.one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
