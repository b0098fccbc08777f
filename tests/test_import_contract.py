"""The import contract (pyproject.toml ``[tool.importlinter]``, docs/architecture.md) holds on the
tree, and breaks on a deliberately wrong import: each contract is run against a copy of the
package with one import added that it exists to refuse.

``make lint`` runs the same contract (``lint-imports``); this test puts it in ``make test``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

import fakegpu

pytest.importorskip("importlinter", reason="import-linter (the test extra) is not installed")

PACKAGE = Path(fakegpu.__file__).resolve().parent
ROOT = PACKAGE.parent
PYPROJECT = ROOT / "pyproject.toml"
# The CLI of import-linter, run by this interpreter (no reliance on a script on PATH).
LINT = [sys.executable, "-c",
        "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"]


def _config() -> dict[str, object]:
    if not PYPROJECT.is_file():
        pytest.skip(f"no {PYPROJECT}: the contract lives in a source checkout's pyproject.toml")
    data = tomllib.loads(PYPROJECT.read_text())
    section = data.get("tool", {}).get("importlinter")
    assert section, f"{PYPROJECT}: no [tool.importlinter] section (the import contract)"
    return dict(section)


def _contract_names() -> dict[str, str]:
    contracts = _config()["contracts"]
    assert isinstance(contracts, list)
    return {str(c["id"]): str(c["name"]) for c in contracts}


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    # cwd first on the path: the copy's `fakegpu` is the one analysed, not the installed one.
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([*LINT, "--no-cache", "--no-logo"], cwd=where, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_tree_keeps_every_contract() -> None:
    names = _contract_names()
    out = _lint(ROOT)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for name in names.values():
        assert f"{name} KEPT" in text, text


def _copy_package(dest: Path) -> None:
    """The package's Python sources only (no built library, no C sources)."""

    def ignore(folder: str, entries: list[str]) -> set[str]:
        return {e for e in entries
                if not (Path(folder, e).is_dir() or e.endswith(".py")) or e == "__pycache__"}

    shutil.copytree(PACKAGE, dest / "fakegpu", ignore=ignore)
    (dest / "pyproject.toml").write_text(
        tomli_w.dumps({"tool": {"importlinter": _config()}}))


# contract id -> (a module of the copy, the wrong import added to it). Each file exists before
# and after cluster/ is split into rooms (__init__ modules of packages that stay).
WRONG = {
    "layers": ("fakegpu/kube/__init__.py", "import fakegpu.cluster.names"),
    "plugin": ("fakegpu/plugin/__init__.py", "import fakegpu.topology.load"),
    "providers": ("fakegpu/cluster/kind/__init__.py", "import fakegpu.cluster.embedded"),
    "product-no-testkit": ("fakegpu/cli/__init__.py", "import fakegpu.testkit.k8s"),
    "fleet": ("fakegpu/fleet/__init__.py", "import fakegpu.cluster.names"),
}


def test_every_contract_has_a_wrong_import_below() -> None:
    assert set(WRONG) == set(_contract_names())


@pytest.mark.parametrize("contract", sorted(WRONG))
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, contract: str) -> None:
    _copy_package(tmp_path)
    module, line = WRONG[contract]
    target = tmp_path / module
    assert target.is_file(), f"{module} is gone: pick another module for {contract}"
    # The copy keeps the contract before the change: what breaks it is the one line.
    before = _lint(tmp_path)
    assert before.returncode == 0, before.stdout + before.stderr
    target.write_text(target.read_text() + f"\n{line}  # deliberately wrong\n")

    out = _lint(tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"{_contract_names()[contract]} BROKEN" in text, text
    wrong = module.removesuffix("/__init__.py").replace("/", ".")
    imported = line.removeprefix("import ")
    assert f"{wrong} -> {imported}" in text, text
