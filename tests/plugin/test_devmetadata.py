"""Device metadata files (KEP-5304, devmetadata.py): what prepare writes, where the CDI spec
mounts it, and that unprepare removes it. What a container reads is
e2e/test_device_metadata.py's."""

from __future__ import annotations

import json
from pathlib import Path

from fakegpu.plugin import devmetadata, slices
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.plugin.prepare import ClaimRef

from .helpers import DRIVER, NODE, ClaimStore, claim, inventory

ROOT = devmetadata.CONTAINER_DIR


def test_the_container_path_follows_how_the_pod_names_the_claim() -> None:
    assert devmetadata.container_path(DRIVER, "mine", "", "gpu") == (
        f"{ROOT}/resourceclaims/mine/gpu/{DRIVER}-metadata.json")
    assert devmetadata.container_path(DRIVER, "p-gpus-x7k2q", "gpus", "gpu") == (
        f"{ROOT}/resourceclaimtemplates/gpus/gpu/{DRIVER}-metadata.json")
    assert devmetadata.base_request("gpu/h100") == "gpu"


def _driver(tmp_path: Path, store: ClaimStore) -> Driver:
    (tmp_path / "cdi").mkdir()
    return Driver(DriverConfig(driver=DRIVER, node=NODE, state_dir=tmp_path / "state",
                               cdi_root=tmp_path / "cdi"), store, Devices(lambda: inventory()))


def test_prepare_writes_one_file_per_request_mounted_by_its_first_device(tmp_path: Path) -> None:
    store = ClaimStore()
    obj = claim("p-gpus-x7k2q", "uid-m", ["gpu-1", "gpu-3"])
    obj["metadata"]["annotations"] = {devmetadata.POD_CLAIM_ANNOTATION: "gpus"}
    obj["status"]["allocation"]["devices"]["results"][1]["request"] = "other/b"  # a subrequest
    store.add(obj)
    driver = _driver(tmp_path, store)
    result = driver.prepare([ClaimRef("default", "p-gpus-x7k2q", "uid-m")])["uid-m"]
    assert result.error == "" and result.claim is not None
    assert [d.cdi_device_ids for d in result.claim.devices] == [
        (f"{DRIVER}/gpu=uid-m-gpu-1", f"{DRIVER}/gpu=uid-m-metadata-gpus"),
        (f"{DRIVER}/gpu=uid-m-gpu-3", f"{DRIVER}/gpu=uid-m-metadata-other")]
    spec = json.loads((tmp_path / "cdi" / result.claim.cdi_spec).read_text())
    mounts = {d["name"]: d["containerEdits"]["mounts"][0] for d in spec["devices"]
              if "mounts" in d["containerEdits"]}
    gpus = mounts["uid-m-metadata-gpus"]
    assert gpus["containerPath"] == (
        f"{ROOT}/resourceclaimtemplates/gpus/gpus/{DRIVER}-metadata.json")
    assert "ro" in gpus["options"]
    doc = json.loads(Path(gpus["hostPath"]).read_text())
    assert doc["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert doc["metadata"] == {"name": "p-gpus-x7k2q", "namespace": "default", "uid": "uid-m",
                               "generation": 1}
    assert doc["podClaimName"] == "gpus"
    inv = inventory()
    assert doc["requests"] == [{"name": "gpus", "devices": [{
        "driver": DRIVER, "pool": NODE, "name": "gpu-1",
        "attributes": slices.device_attributes(inv.by_name()["gpu-1"], inv)}]}]
    other = json.loads(Path(mounts["uid-m-metadata-other"]["hostPath"]).read_text())
    assert [d["name"] for d in other["requests"][0]["devices"]] == ["gpu-3"]

    assert driver.unprepare([ClaimRef("default", "p-gpus-x7k2q", "uid-m")]) == {"uid-m": ""}
    assert not Path(gpus["hostPath"]).exists()
    assert not (tmp_path / "state" / "metadata" / "uid-m").exists()


def test_as_nvidias_driver_the_file_has_the_slices_attributes(tmp_path: Path) -> None:
    # The same shape as the slice (shape.py): NVIDIA's current driver has no index or minor.
    from fakegpu.plugin.shape import Shape

    store = ClaimStore()
    obj = claim("p-gpus-x7k2q", "uid-n", ["gpu-1"])
    obj["metadata"]["annotations"] = {devmetadata.POD_CLAIM_ANNOTATION: "gpus"}
    store.add(obj)
    (tmp_path / "cdi").mkdir()
    nvidia = Shape(nvidia=True)
    driver = Driver(DriverConfig(driver=DRIVER, node=NODE, state_dir=tmp_path / "state",
                                 cdi_root=tmp_path / "cdi", shape=nvidia), store,
                    Devices(lambda: inventory()))
    result = driver.prepare([ClaimRef("default", "p-gpus-x7k2q", "uid-n")])["uid-n"]
    assert result.error == "" and result.claim is not None
    spec = json.loads((tmp_path / "cdi" / result.claim.cdi_spec).read_text())
    (mount,) = [d["containerEdits"]["mounts"][0] for d in spec["devices"]
                if "mounts" in d["containerEdits"]]
    (device,) = json.loads(Path(mount["hostPath"]).read_text())["requests"][0]["devices"]
    inv = inventory()
    assert device["attributes"] == slices.device_attributes(inv.by_name()["gpu-1"], inv, nvidia)
    assert "index" not in device["attributes"] and "minor" not in device["attributes"]
