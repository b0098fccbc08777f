#!/bin/sh
# Fuzz the NVML state file for SECONDS (default 60):  sh fuzz/state.sh 600
# Mutated state files (dynamic part, header, anywhere; checksum re-signed or not; truncated),
# some vandalised while the client has them mapped, each run through a C client (nvmlInit,
# enumeration, MIG queries and changes, events, shutdown), every fourth also through an
# ASan/UBSan build of library + client. Needs gcc (installed with apt-get when missing).
# Corpus of findings: fuzz/out/state/crashes/. Last line:
#   fuzz state: <N> inputs, <M> crashes
# Exit 1 when it found a crash. Contract and results: docs/reliability.md.
set -eu
cd "$(dirname "$0")/.."
seconds="${1:-60}"
py=.venv/bin/python
[ -x "$py" ] || py=python3
if ! command -v gcc >/dev/null 2>&1; then
    apt-get install -y -q gcc >&2
fi
out=fuzz/out/state/bin
mkdir -p "$out"
header_dir=$("$py" -c 'from fakegpu.nvml import build; print(build.find_header().parent)')
libdir=$("$py" -c 'from fakegpu.nvml import env; print(env.libdir())')
gcc -O1 -g -Wall -Werror -I"$header_dir" fuzz/state_client.c -o "$out/client" \
    -L"$libdir" -l:libnvidia-ml.so.1
# the sanitizer build links the hand-written sources straight in (the client calls no stub)
gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    -std=gnu11 -pthread -DNVML_NO_UNVERSIONED_FUNC_DEFS -I"$header_dir" \
    -Ifakegpu/nvml/csrc fakegpu/nvml/csrc/*.c fuzz/state_client.c -o "$out/client-asan"
exec "$py" fuzz/state.py "$seconds" "$out/client" "$out/client-asan"
