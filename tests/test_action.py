"""The composite GitHub Action (action.yml): its shape, and its scripts run against fakegpu's
real command-line parser.

actionlint checks workflows, not an action's own file: tests/kind/test_workflow.py lints the
action's steps as a workflow and the sample workflows of docs/vendors.md. Here, without tools:
every input referenced is declared and every declared one used, outputs name steps that write
them, every run step has a shell and takes inputs only through its environment; and the
scripts that build command lines (cluster up, conformance) run in bash with a stand-in
``fakegpu`` that parses its arguments with fakegpu's own parser, so a flag the CLI does not
have fails here, not on a vendor's runner.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ACTION = REPO / "action.yml"
VENDORS = REPO / "docs" / "vendors.md"
INPUT_REF = re.compile(r"\binputs\.([A-Za-z0-9_-]+)")
STEP_REF = re.compile(r"\bsteps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)")


def _action() -> dict[str, Any]:
    doc = yaml.safe_load(ACTION.read_text())
    assert isinstance(doc, dict)
    return doc


def _steps() -> list[dict[str, Any]]:
    steps = _action()["runs"]["steps"]
    assert isinstance(steps, list)
    return steps


def _step(step_id: str) -> dict[str, Any]:
    found = [s for s in _steps() if s.get("id") == step_id]
    assert len(found) == 1, f"no single step with id {step_id!r}"
    return found[0]


def test_is_a_composite_action_at_the_root() -> None:
    # `uses: owner/fakegpu@ref` finds action.yml at the repository's root, nowhere else.
    doc = _action()
    assert doc["runs"]["using"] == "composite"
    assert doc["name"] and doc["description"]


def test_every_input_referenced_is_declared_and_every_declared_one_used() -> None:
    declared = set(_action()["inputs"])
    used = set(INPUT_REF.findall(yaml.safe_dump(_steps())))
    assert used - declared == set(), "referenced but not declared"
    assert declared - used == set(), "declared but never used"


def test_inputs_are_described_and_have_string_defaults() -> None:
    for name, spec in _action()["inputs"].items():
        assert spec.get("description"), name
        # A composite action's inputs are strings; an absent default would be "" anyway,
        # written out so the reader sees it.
        assert isinstance(spec.get("default"), str), name


def test_outputs_name_steps_that_write_them() -> None:
    outputs = _action()["outputs"]
    assert set(outputs) == {"kubeconfig", "report-dir"}
    for name, spec in outputs.items():
        match = STEP_REF.fullmatch(spec["value"].strip().removeprefix("${{").removesuffix("}}")
                                   .strip())
        assert match, f"output {name}: {spec['value']}"
        step = _step(match[1])
        assert f'echo "{match[2]}=' in step["run"], f"step {match[1]} never writes {match[2]}"


def test_steps_referenced_come_earlier() -> None:
    seen: set[str] = set()
    for step in _steps():
        text = yaml.safe_dump({k: v for k, v in step.items() if k != "id"})
        for ref, _ in STEP_REF.findall(text) + re.findall(r"\bsteps\.([\w-]+)\.(outcome)", text):
            assert ref in seen, f"step {step.get('name') or step.get('uses')} reads {ref} first"
        if "id" in step:
            seen.add(step["id"])


def test_every_run_step_has_a_shell_and_no_expression_in_its_script() -> None:
    for step in _steps():
        if "run" not in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+", step["uses"]), step["uses"]
            continue
        assert step.get("shell") == "bash", step.get("name")
        assert step.get("name"), step["run"][:40]
        # Inputs reach scripts through env: (an expression in the script is pasted into the
        # shell's source: a quote in an input would be code).
        assert "${{" not in step["run"], step["name"]


# --- the scripts, run --------------------------------------------------------------------------

STATUS = {"driver_name": "gpu.fakegpu.dev", "workload_image": "fakegpu.local/workload:0.1.0"}


def _stand_in(bindir: Path, calls: Path, kubeconfig: Path) -> None:
    """``fakegpu`` that parses its arguments with the real parser, records them, and answers
    ``cluster up`` (the kubeconfig's path) and ``cluster status`` (JSON) as fakegpu does."""
    script = bindir / "fakegpu"
    script.write_text(f"""#!{sys.executable}
import json, sys
from fakegpu.cli import build_parser
argv = sys.argv[1:]
build_parser().parse_args(argv)  # an unknown flag or bad value: argparse's exit 2
with open({str(calls)!r}, "a") as f:
    f.write(json.dumps(argv) + "\\n")
if argv[:2] == ["cluster", "up"]:
    print({str(kubeconfig)!r})
elif argv[:2] == ["cluster", "status"]:
    print(json.dumps({STATUS!r}))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _run_step(step_id: str, tmp_path: Path, inputs: dict[str, str]) -> tuple[list[list[str]],
                                                                              dict[str, str]]:
    """Run a step's script as the runner would, inputs substituted into its env:; the
    stand-in's calls and what the step wrote to GITHUB_ENV and GITHUB_OUTPUT."""
    defaults = {k: v["default"] for k, v in _action()["inputs"].items()}
    values = {**defaults, **inputs}
    step = _step(step_id)
    env = dict(os.environ)
    for name, expr in (step.get("env") or {}).items():
        ref = INPUT_REF.search(expr)
        env[name] = values[ref[1]] if ref else str(tmp_path / "report")
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    _stand_in(bindir, calls, tmp_path / "kubeconfig")
    as_root = tmp_path / "as-root"
    as_root.write_text('#!/bin/sh\nexec "$@"\n')
    as_root.chmod(0o755)
    files = {"GITHUB_ENV": tmp_path / "github_env", "GITHUB_OUTPUT": tmp_path / "github_output"}
    env.update({k: str(v) for k, v in files.items()})
    # The stand-in first, then this test's Python (the scripts' `python` imports fakegpu).
    path = os.pathsep.join((str(bindir), str(Path(sys.executable).parent), env["PATH"]))
    env.update(PATH=path, RUNNER_TEMP=str(tmp_path),
               FAKEGPU_AS_ROOT=str(as_root), KUBECONFIG=str(tmp_path / "kubeconfig"))
    out = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    written: dict[str, str] = {}
    for path in files.values():
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                written[key] = value
    return made, written


def test_cluster_up_passes_only_the_inputs_given(tmp_path: Path) -> None:
    calls, written = _run_step("up", tmp_path, {})
    assert calls == [["cluster", "up", "--cluster", "fakegpu", "--provider", "embedded",
                      "--driver", "fakegpu"]]
    mine = Path(written["KUBECONFIG"])
    assert written["kubeconfig"] == str(mine) and mine.parent == tmp_path
    assert mine.read_text() == (tmp_path / "kubeconfig").read_text()
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600


def test_cluster_up_with_a_vendor_plugin(tmp_path: Path) -> None:
    calls, _ = _run_step("up", tmp_path, {
        "topology": "dgx-h100", "k8s-version": "1.36", "driver": "nvidia",
        "plugin-bin": "bin/kubelet-plugin", "plugin-preset": "nvidia",
        "plugin-driver": "gpu.example.com",
        "plugin-args": "--node-name={node}\n\n--kubeconfig={kubeconfig}\n-v=4\n"})
    assert calls == [["cluster", "up", "--cluster", "fakegpu", "--provider", "embedded",
                      "--driver", "nvidia", "--topology", "dgx-h100", "--k8s-version", "1.36",
                      "--plugin-bin", "bin/kubelet-plugin", "--plugin-preset", "nvidia",
                      "--plugin-driver", "gpu.example.com", "--plugin-arg=--node-name={node}",
                      "--plugin-arg=--kubeconfig={kubeconfig}", "--plugin-arg=-v=4"]]


def test_cluster_up_with_a_vendor_chart_on_kind(tmp_path: Path) -> None:
    calls, _ = _run_step("up", tmp_path, {
        "provider": "kind", "plugin-chart": "deploy/chart", "plugin-driver": "gpu.example.com",
        "plugin-values": "ci/values.yaml\n\nci/more.yaml\n",
        "plugin-images": "example.com/driver:v1\n"})
    assert calls == [["cluster", "up", "--cluster", "fakegpu", "--provider", "kind",
                      "--driver", "fakegpu", "--plugin-driver", "gpu.example.com",
                      "--plugin-chart", "deploy/chart", "--plugin-values", "ci/values.yaml",
                      "--plugin-values", "ci/more.yaml", "--plugin-image",
                      "example.com/driver:v1"]]


def test_binaries_fill_the_cache_for_the_version_asked(tmp_path: Path) -> None:
    calls, _ = _run_step("binaries", tmp_path, {})
    assert calls == [["cluster", "binaries"]]
    calls, _ = _run_step("binaries", tmp_path, {"k8s-version": "1.35"})
    assert calls[-1] == ["cluster", "binaries", "--k8s-version", "1.35"]


def test_conformance_defaults_to_the_cluster_driver_and_workload_image(tmp_path: Path) -> None:
    calls, _ = _run_step("conformance", tmp_path, {})
    kubeconfig, report = str(tmp_path / "kubeconfig"), str(tmp_path / "report")
    assert calls[-1] == ["conformance", "--kubeconfig", kubeconfig, "--report", report,
                         "--image", STATUS["workload_image"], "--driver", "gpu.fakegpu.dev"]


def test_conformance_of_a_vendor_driver(tmp_path: Path) -> None:
    caps = tmp_path / "caps.yaml"
    calls, _ = _run_step("conformance", tmp_path, {
        "plugin-driver": "gpu.example.com", "device-class": "gpu.example.com",
        "capabilities": str(caps), "image": "registry.example.com/busybox:1"})
    assert calls[-1][5:] == ["--device-class", "gpu.example.com", "--capabilities", str(caps),
                             "--image", "registry.example.com/busybox:1",
                             "--driver", "gpu.example.com"]
    calls, _ = _run_step("conformance", tmp_path, {"plugin-driver": "gpu.example.com",
                                                   "driver-name": "gpu.other.com"})
    assert calls[-1][-2:] == ["--driver", "gpu.other.com"]
    # a preset's plugin publishes its own driver (dra-example: gpu.example.com)
    calls, _ = _run_step("conformance", tmp_path, {"plugin-preset": "dra-example"})
    assert calls[-1][-2:] == ["--driver", "gpu.example.com"]


def test_an_existing_cluster_is_used_as_it_is(tmp_path: Path) -> None:
    given = tmp_path / "theirs.kubeconfig"
    given.write_text("apiVersion: v1\nkind: Config\n")
    calls, written = _run_step("up", tmp_path, {"kubeconfig": "theirs.kubeconfig"})
    assert calls == []  # no cluster brought up
    assert written["KUBECONFIG"] == written["kubeconfig"] == str(given)
    calls, _ = _run_step("conformance", tmp_path, {"kubeconfig": str(given),
                                                   "driver-name": "gpu.example.com"})
    # no status asked (fakegpu did not make it), no --image (its nodes pull the default)
    assert calls == [["conformance", "--kubeconfig", str(tmp_path / "kubeconfig"), "--report",
                      str(tmp_path / "report"), "--driver", "gpu.example.com"]]
    with pytest.raises(AssertionError, match="driver-name: required"):
        _run_step("conformance", tmp_path, {"kubeconfig": str(given)})


def test_paths_step_writes_a_wrapper_and_the_cache_dir(tmp_path: Path) -> None:
    _, written = _run_step("paths", tmp_path, {"provider": "kind", "report-dir": "out/report"})
    wrapper = Path(written["FAKEGPU_AS_ROOT"])
    # kind (and root anywhere) runs commands as they are.
    out = subprocess.run([str(wrapper), "echo", "a b"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == "a b\n"
    assert written["report-dir"] == str(tmp_path / "out" / "report")
    assert written["FAKEGPU_CACHE_DIR"]


def test_paths_step_refuses_an_unknown_provider(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="expected embedded or kind"):
        _run_step("paths", tmp_path, {"provider": "minikube"})
# --- docs/vendors.md's workflows ----------------------------------------------------------------


def sample_workflows() -> dict[str, str]:
    """The complete workflows of docs/vendors.md: YAML blocks whose first line names their file
    (``# .github/workflows/NAME.yml``)."""
    blocks = re.findall(r"```yaml\n(# \.github/workflows/([\w.-]+\.yml)\n.*?)```",
                        VENDORS.read_text(), re.S)
    return {name: text for text, name in blocks}


def test_vendor_workflows_use_only_declared_inputs() -> None:
    samples = sample_workflows()
    assert len(samples) >= 2, "docs/vendors.md: a workflow per path (your cluster, embedded)"
    declared = set(_action()["inputs"])
    for name, text in samples.items():
        wf = yaml.safe_load(text)
        used = [s for job in wf["jobs"].values() for s in job.get("steps", [])
                if "/fakegpu@" in s.get("uses", "")]
        for step in used:
            assert set(step.get("with") or {}) <= declared, (name, step["with"])
        for job in wf["jobs"].values():
            for step in job.get("steps", []):
                assert "run" in step or "uses" in step, (name, step)
