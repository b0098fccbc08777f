"""The conformance report: one outcome per check, written as a markdown table.

Outcomes come from pytest's reports: passed, failed (a failure or an error in setup), and
the two skips the suite itself decides, told apart by the start of their reason:
``not applicable: ...`` (the check's feature gate is off on this release) and
``not declared: ...`` (the capabilities file does not claim it). Any other skip is reported
as ``skipped`` with its reason (e.g. a missing prerequisite of fakegpu's own cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fakegpu import fsutil

from .checks import CHECKS, Check
from .target import Target

NOT_APPLICABLE = "not applicable"
NOT_DECLARED = "not declared"


@dataclass(frozen=True)
class Outcome:
    result: str  # passed | failed | not applicable | not declared | skipped | not run
    detail: str = ""


def classify(outcome: str, when: str, reason: str) -> Outcome:
    """An outcome from one pytest report (``outcome`` passed/failed/skipped, its phase)."""
    if outcome == "failed":
        why = _failure_reason(reason)
        where = "failed" if when == "call" else f"error in {when}"
        return Outcome("failed", f"{where}: {why}" if why else where)
    if outcome == "skipped":
        for kind in (NOT_APPLICABLE, NOT_DECLARED):
            if reason.startswith(kind + ":"):
                return Outcome(kind, reason[len(kind) + 1:].strip())
        return Outcome("skipped", reason)
    return Outcome("passed")


def _failure_reason(longrepr: str) -> str:
    """What went wrong, from pytest's failure text: its ``E`` lines (the exception and the
    assertion's explanation), not the last line, which is only ``file.py:12: AssertionError``."""
    lines = [line.rstrip() for line in longrepr.strip().splitlines()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    text = " ".join(e for e in errors if e) if errors else (lines[-1] if lines else "")
    return text[:300] + ("..." if len(text) > 300 else "")


def check_of(test_name: str) -> Check | None:
    """The catalogue entry of test function ``test_<id>`` (parametrised ids stripped)."""
    base = test_name.split("[", 1)[0].removeprefix("test_")
    return next((c for c in CHECKS if c.id == base), None)


def render(target: Target | None, outcomes: Mapping[str, Outcome],
           gates: Iterable[str] = (), *, stopped: bool = False) -> str:
    """The markdown report: the cluster, the driver, the gates the checks need, a table;
    ``stopped``: the run was interrupted, so what is "not run" may never have begun."""
    lines = ["# DRA driver conformance (fakegpu.conformance)", ""]
    if stopped:
        lines += ["**The run was stopped before its end** (interrupted): the results below are "
                  "those it reached; a check `not run` did not finish.", ""]
    if target is not None:
        facts = target.facts
        lines += [f"- driver: `{target.driver}`, device class `{target.device_class}`",
                  f"- cluster: Kubernetes {facts.version}, resource.k8s.io/{facts.resource_api}",
                  f"- capabilities: {target.capabilities.source}"]
        wanted = sorted({c.gate for c in CHECKS if c.gate} | set(gates))
        if facts.gates:
            lines.append("- gates: " + ", ".join(
                f"{g}={'on' if facts.gates.get(g) else 'off'}" for g in wanted))
        else:
            lines.append(f"- {facts.gates_note}")
    counts: dict[str, int] = {}
    for c in CHECKS:
        got = outcomes.get(c.id, Outcome("not run"))
        counts[got.result] = counts.get(got.result, 0) + 1
    lines += ["- summary: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items())), "",
              "| check | capability | gate | result | detail |", "|---|---|---|---|---|"]
    for c in CHECKS:
        got = outcomes.get(c.id, Outcome("not run"))
        detail = got.detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{c.id}`: {c.title} | {c.capability} | {c.gate or '-'} | "
                     f"**{got.result}** | {detail} |")
    return "\n".join(lines) + "\n"


def write(out_dir: Path, text: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    return fsutil.atomic_write(out_dir / "conformance.md", text)
