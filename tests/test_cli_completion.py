"""``fakegpu completion bash|zsh`` loaded by the real shells, and what they then complete.

The scripts come from shtab; these tests do what a user does with them (zsh: the file in a
``$fpath`` directory as ``_fakegpu``, or ``eval`` after ``compinit``; bash: ``eval``) and then
ask the shell's own completion for candidates: bash by calling the function ``complete -p``
names with ``COMP_WORDS`` set, zsh by typing TAB into an interactive zsh on a pseudo-terminal
(``zsh/zpty``), with ``compadd`` wrapped to write down what it is given.

zsh is obtained as the other host tools are (Debian's package through ``fakegpu.hostpkgs``, as
for Docker or debootstrap); only a host that cannot install it (not root, no apt) skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fakegpu.cli.completion import script

# Typed, then TAB: (line, words that must be offered, words that must not: hidden aliases).
CASES = [
    ("fakegpu ", {"cluster", "topology", "smi", "completion", "computedomain"}, set()),
    ("fakegpu cluster ", {"up", "down", "status", "logs"}, set()),
    ("fakegpu cluster status --", {"--cluster", "--output"}, {"--name"}),
    ("fakegpu computedomain plugin --", {"--namespace", "--kubelet-root", "--node"},
     {"--node-name"}),
]
TIMEOUT_S = 60

# In the interactive zsh: the completion system, compadd wrapped (every candidate it is given
# goes to $FG_OUT), and TAB bound to a widget that completes and then marks the end.
ZSH_SETUP = r"""
fpath=("$FG_FPATH" $fpath)
autoload -Uz compinit && compinit -u -D
compadd() {
  local -a hits
  builtin compadd -O hits "$@"
  print -rl -- $hits >> "$FG_OUT"
  builtin compadd "$@"
}
_fg_complete() { zle complete-word; print -r -- '--done--' >> "$FG_OUT" }
zle -N _fg_complete
bindkey '^I' _fg_complete
print -r -- READY
"""
# Outside: start that zsh on a pseudo-terminal, type the line and TAB, wait for the mark.
ZSH_DRIVE = r"""
zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z "source ${(q)FG_SETUP}"
zpty -r z line '*READY*'
zpty -w -n z "$FG_LINE"$'\t'
for i in {1..400}; do
  [[ -s $FG_OUT && $(<$FG_OUT) == *--done--* ]] && break
  sleep 0.05
done
zpty -d z
"""
# bash: what readline would do on TAB, by hand: the completion function of `complete -p
# fakegpu` with COMP_WORDS/COMP_CWORD of the line, then COMPREPLY, one per line.
BASH_DRIVE = r"""
eval "$(cat "$FG_SCRIPT")"
spec=$(complete -p fakegpu) || exit 3
func=${spec#*-F }; func=${func%% *}
COMP_LINE=$FG_LINE; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
"$func" fakegpu "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="session")
def zsh() -> str:
    found = shutil.which("zsh")
    if found is None:
        from fakegpu import hostpkgs
        from fakegpu.errors import MissingPrerequisite

        try:
            hostpkgs.ensure(("zsh",), why="the zsh completion test")
        except MissingPrerequisite as err:
            pytest.skip(f"no zsh, and it cannot be installed here: {err}")
        found = shutil.which("zsh")
    assert found is not None, "zsh installed but not on PATH"
    return found


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={"PATH": os.environ["PATH"], "HOME": env["HOME"], **env},
                          check=False)


def test_zsh_autoloads_the_script_from_fpath(zsh: str, tmp_path: Path) -> None:
    """The documented way: the script as ``_fakegpu`` in a directory of ``$fpath``."""
    (tmp_path / "_fakegpu").write_text(script("zsh"))
    done = _run([zsh, "-f", "-c", 'fpath=("$FG_FPATH" $fpath); autoload -Uz compinit; '
                 'compinit -u -D; print -r -- "$_comps[fakegpu]"'],
                {"HOME": str(tmp_path), "FG_FPATH": str(tmp_path)})
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == "_fakegpu"


def test_zsh_registers_the_script_given_to_eval(zsh: str, tmp_path: Path) -> None:
    """``eval "$(fakegpu completion zsh)"`` after compinit defines the completion function and
    binds it to ``fakegpu``."""
    path = tmp_path / "fakegpu.zsh"
    path.write_text(script("zsh"))
    done = _run([zsh, "-f", "-c", 'autoload -Uz compinit; compinit -u -D; '
                 'eval "$(<$FG_SCRIPT)"; print -r -- "$_comps[fakegpu]"; '
                 'print -r -- ${+functions[$_comps[fakegpu]]}'],
                {"HOME": str(tmp_path), "FG_SCRIPT": str(path)})
    assert (done.returncode, done.stderr) == (0, "")
    function, defined = done.stdout.split()
    assert function.startswith("_") and defined == "1", done.stdout


def _case_id(value: object) -> str:
    # sorted: a set's order changes with each process's hash seed, and pytest-xdist's workers
    # must all collect the same ids
    return " ".join(sorted(value)) if isinstance(value, (set, frozenset)) else str(value)


@pytest.mark.parametrize(("line", "offered", "hidden"), CASES, ids=_case_id)
def test_zsh_completes_commands_and_options(zsh: str, tmp_path: Path, line: str,
                                            offered: set[str], hidden: set[str]) -> None:
    fpath = tmp_path / "fpath"
    fpath.mkdir()
    (fpath / "_fakegpu").write_text(script("zsh"))
    setup, drive, out = tmp_path / "setup.zsh", tmp_path / "drive.zsh", tmp_path / "out"
    setup.write_text(ZSH_SETUP)
    drive.write_text(ZSH_DRIVE)
    done = _run([zsh, "-f", str(drive)], {
        "HOME": str(tmp_path), "FG_FPATH": str(fpath), "FG_OUT": str(out),
        "FG_SETUP": str(setup), "FG_LINE": line})
    assert done.returncode == 0, done.stderr
    words = set(out.read_text().split()) if out.exists() else set()
    assert "--done--" in words, f"zsh never finished completing {line!r}: {done.stderr}"
    assert offered <= words, f"{line!r}: missing {offered - words}, got {sorted(words)}"
    assert not hidden & words, f"{line!r}: hidden aliases offered: {hidden & words}"


@pytest.mark.parametrize(("line", "offered", "hidden"), CASES, ids=_case_id)
def test_bash_completes_commands_and_options(tmp_path: Path, line: str, offered: set[str],
                                             hidden: set[str]) -> None:
    bash = shutil.which("bash")
    assert bash is not None, "bash is this project's shell (Makefile, tools/)"
    path = tmp_path / "fakegpu.bash"
    path.write_text(script("bash"))
    done = _run([bash, "--norc", "--noprofile", "-c", BASH_DRIVE],
                {"HOME": str(tmp_path), "FG_SCRIPT": str(path), "FG_LINE": line})
    assert (done.returncode, done.stderr) == (0, "")
    words = set(done.stdout.split())
    assert offered <= words, f"{line!r}: missing {offered - words}, got {sorted(words)}"
    assert not hidden & words, f"{line!r}: hidden aliases offered: {hidden & words}"
