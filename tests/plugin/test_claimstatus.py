"""Driver-owned claim status: Ready and Healthy conditions on each prepared device's entry,
rewritten when health changes and only then, transition times kept while a status stays."""

from __future__ import annotations

from pathlib import Path

from fakegpu.kubeletplugin.checkpoint import PreparedClaim, PreparedDevice, Records
from fakegpu.kubeletplugin.health import DeviceStatus
from fakegpu.plugin.claimstatus import ClaimConditions, apply, conditions

from .helpers import DRIVER, NODE, ClaimStore, claim


def _prepared(records: Records, name: str, uid: str, devices: list[str]) -> None:
    records.dir.mkdir(parents=True, exist_ok=True)
    record = PreparedClaim(uid=uid, namespace="default", name=name, cdi_spec="x.json",
                           devices=tuple(PreparedDevice(("gpus",), NODE, d, (f"c/{d}",))
                                         for d in devices))
    records.commit(uid, records.stage(record))


def by_type(entry: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in entry["conditions"]}  # type: ignore[attr-defined,index]


def test_conditions_keep_their_transition_time_while_the_status_stays() -> None:
    first = conditions("HEALTHY", "", 3, now="2026-01-01T00:00:00Z")
    assert [(c["type"], c["status"], c["reason"]) for c in first] == [
        ("Ready", "True", "Prepared"), ("Healthy", "True", "DeviceHealthy")]
    assert {c["observedGeneration"] for c in first} == {3}
    again = conditions("HEALTHY", "", 3, first, now="2026-01-02T00:00:00Z")
    assert again == first
    sick = conditions("UNHEALTHY", f"{DRIVER}/xid=79", 3, first, now="2026-01-03T00:00:00Z")
    assert sick[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # Ready did not change
    assert (sick[1]["status"], sick[1]["reason"], sick[1]["message"],
            sick[1]["lastTransitionTime"]) == ("False", "DeviceUnhealthy", f"{DRIVER}/xid=79",
                                               "2026-01-03T00:00:00Z")


def test_apply_fills_this_drivers_entries_and_keeps_the_rest() -> None:
    obj = claim("c", "u", ["gpu-0", "gpu-1"])
    obj["status"]["devices"] = [
        {"driver": DRIVER, "pool": NODE, "device": "gpu-0", "data": {"uuid": "GPU-0"}},
        {"driver": "other.example.com", "pool": NODE, "device": "gpu-0"}]
    out = apply(obj, DRIVER, NODE, {"gpu-0": ("HEALTHY", ""), "gpu-1": ("UNHEALTHY", "m")})
    entries = out["status"]["devices"]
    assert entries[0]["data"] == {"uuid": "GPU-0"}  # prepare's data stays
    assert by_type(entries[0])["Healthy"]["status"] == "True"
    assert "conditions" not in entries[1]  # another driver's entry
    assert (entries[2]["device"], by_type(entries[2])["Healthy"]["status"]) == ("gpu-1", "False")


def test_a_health_change_rewrites_the_claims_using_that_device_only(tmp_path: Path) -> None:
    store, records = ClaimStore(), Records(tmp_path)
    for name, uid, devices in (("a", "ua", ["gpu-0"]), ("b", "ub", ["gpu-1"])):
        store.add(claim(name, uid, devices))
        _prepared(records, name, uid, devices)
    health = {"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}
    writer = ClaimConditions(store, records, DRIVER, NODE,
                             lambda: [DeviceStatus(d, h, "") for d, h in health.items()])
    assert writer.sync() == 2
    assert writer.sync() == 0  # nothing changed: no write
    health["gpu-1"] = "UNHEALTHY"
    assert writer.sync() == 1
    [entry] = store.get_claim("default", "b")["status"]["devices"]
    assert by_type(entry)["Healthy"]["status"] == "False"
    assert by_type(store.get_claim("default", "a")["status"]["devices"][0])["Healthy"][
        "status"] == "True"
    records.remove("ub")  # unprepared: forgotten, and never written again
    health["gpu-1"] = "HEALTHY"
    assert writer.sync() == 0
