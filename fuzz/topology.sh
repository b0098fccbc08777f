#!/bin/sh
# Fuzz the topology loader + validation + state-file render for SECONDS (default 60):
#   sh fuzz/topology.sh 600
# Installs atheris (coverage-guided libFuzzer) into the venv when it can; without it the
# target runs plain mutations. Corpus and crashing inputs: fuzz/out/topology/. Last line:
#   fuzz topology: <N> inputs, <M> crashes
# Exit 1 when it found a crash. Contract and results: docs/reliability.md.
set -eu
cd "$(dirname "$0")/.."
seconds="${1:-60}"
py=.venv/bin/python
[ -x "$py" ] || py=python3
if ! "$py" -c "import atheris" 2>/dev/null; then
    # Wheels only: building atheris needs clang and libFuzzer, which this machine need not have.
    "$py" -m pip install -q --only-binary=:all: "atheris>=2.3" >&2 ||
        echo "fuzz topology: atheris not installable, falling back to plain mutations" >&2
fi
exec "$py" fuzz/topology.py "$seconds"
