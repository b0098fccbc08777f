#!/bin/sh
# Fuzz the DRA plugin's gRPC requests for SECONDS (default 60); contract in tools/fuzz.sh.
# A real plugin server (fuzz/grpc_target.py, atheris/libFuzzer) on a fake NVML node; corpus
# and crashing inputs under fuzz/out/grpc/. Last line: "fuzz grpc: <N> inputs, <M> crashes".
# `sh fuzz/grpc.sh FILE` replays one saved input (a crash) instead, on a fresh server.
set -eu
if [ -f "${1:-}" ]; then  # a saved input: absolute, as we change directory next
    set -- "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
fi
cd "$(dirname "$0")/.."
seconds="${1:-60}"
py="${PYTHON:-.venv/bin/python}"
out=fuzz/out/grpc
mkdir -p "$out/corpus"
"$py" -c "import atheris" 2>/dev/null || "$py" -m pip install -q "atheris>=2.3"
# tmpfs when there is one: the plugin fsyncs every prepare, and a disk would pace the fuzzer.
work=$(mktemp -d /dev/shm/fgz-XXXXXX 2>/dev/null || mktemp -d /tmp/fgz-XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
mkdir "$work/plugin"
# The node: a100-0 of the packaged topology mixed (whole GPUs and MIG devices), its own state file.
env_lines=$("$py" - "$work/node.state" <<'PY'
import shlex, sys
from fakegpu.nvml import env, state
from fakegpu.topology import packaged
from fakegpu.topology.load import load_topology
topology = load_topology(packaged.path("mixed"))
node = topology.nodes[0].name
state.render(topology, node, sys.argv[1])
for key, value in {**env.env(sys.argv[1]), "FAKEGPU_FUZZ_NODE": node}.items():
    print(f"export {key}={shlex.quote(value)}")
PY
)
eval "$env_lines"
if [ -f "$seconds" ]; then  # replay
    FAKEGPU_FUZZ_DIR="$work" "$py" fuzz/grpc_target.py "$seconds"
    exit
fi
marker="$work/started"
touch "$marker"
status=0
FAKEGPU_FUZZ_DIR="$work" nice "$py" fuzz/grpc_target.py "$out/corpus" \
    -max_total_time="$seconds" -artifact_prefix="$out/" -max_len=2048 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 >"$out/last.log" 2>&1 || status=$?
tail -n 30 "$out/last.log"
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/last.log" | tail -n 1)
crashes=$(find "$out" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' \
    -o -name 'oom-*' -o -name 'leak-*' \) -newer "$marker" | wc -l)
echo "fuzz grpc: ${runs:-0} inputs, $((crashes)) crashes"
[ "$status" -eq 0 ] && [ "$crashes" -eq 0 ]
