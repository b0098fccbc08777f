#!/bin/sh
# Run on a machine with a real NVIDIA GPU (the device session's H200) from the repo root.
# Needs python3 and pynvml; a session can carry pynvml.py in an ignored folder (.device/) since
# the machine reaches no package index. Writes the real GPU's answers to $OUT/real.json.
set -eu
OUT="${OUT:-/tmp/fakegpu-fidelity}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/.device${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1 || true
nvidia-smi mig -lgip > "$OUT/nvidia-smi-lgip.txt" 2>&1 || true
nvidia-smi mig -lgipp > "$OUT/nvidia-smi-lgipp.txt" 2>&1 || true
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1 || true
python3 -m fakegpu.nvml.probe > "$OUT/real.json"
echo "wrote $OUT"
