#!/bin/sh
# Run every fuzz target (fuzz/*.sh) for a time budget each: `make fuzz FUZZ_SECONDS=600`.
# Each target installs what it needs, runs for the given seconds, keeps its corpus and any
# crashing input under fuzz/out/<target>/ (ignored by git), prints a last line
#   fuzz <target>: <N> inputs, <M> crashes
# and exits non-zero when it found a crash. docs/reliability.md records the counts.
set -eu
cd "$(dirname "$0")/.."
seconds="${1:-60}"
status=0
for target in fuzz/*.sh; do
    [ -e "$target" ] || { echo "no fuzz targets under fuzz/" >&2; exit 1; }
    echo ">>> $target for ${seconds}s"
    sh "$target" "$seconds" || status=1
done
exit "$status"
