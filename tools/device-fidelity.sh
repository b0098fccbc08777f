#!/bin/sh
# Run on a machine with a real NVIDIA GPU (the device session's H200) from the repo root.
# Needs python3 and pynvml (nvidia-ml-py); a session can carry pynvml.py in an ignored folder
# (.device/) where the machine lacks it. Writes the real GPU's answers to $OUT/real.json and,
# beside it, what nvidia-smi prints and what a driver root holds (the fake's host builder and
# nvidia-smi are compared against these by hand: docs/fidelity.md). Reads only; changes nothing.
set -eu
OUT="${OUT:-/tmp/fakegpu-fidelity}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/.device${PYTHONPATH:+:$PYTHONPATH}"
smi() { name="$1"; shift; nvidia-smi "$@" > "$OUT/smi-$name.txt" 2>&1 || echo "exit $?" >> "$OUT/smi-$name.txt"; }
smi q -q
smi summary
smi L -L
smi lgip mig -lgip
smi lgipp mig -lgipp
smi topo topo -m
smi help-compute-policy compute-policy --help
smi compute-policy-l compute-policy -l
smi qx -q -x
smi q-i0 -i 0 -q
smi query-csv --query-gpu=index,name,pci.bus_id,memory.total,mig.mode.current,compute_mode --format=csv
{
  echo "## uname"; uname -a
  echo "## /dev/nvidia*"; ls -la /dev/nvidia* 2>&1 || true
  echo "## /dev/nvidia-caps"; ls -la /dev/nvidia-caps 2>&1 || true
  echo "## /proc/driver/nvidia"; find /proc/driver/nvidia -maxdepth 4 2>&1 | head -200 || true
  echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version 2>&1 || true
  for f in /proc/driver/nvidia/gpus/*/information; do echo "## $f"; cat "$f" 2>&1 || true; done
  echo "## capabilities"; find /proc/driver/nvidia/capabilities -type f 2>/dev/null | head -50 | while read -r f; do echo "$f: $(cat "$f" 2>&1 | tr '\n' ' ')"; done
  echo "## libraries"; ls -la /usr/local/nvidia/lib64/libnvidia-ml* /usr/lib/x86_64-linux-gnu/libnvidia-ml* 2>&1 || true
  echo "## nvidia-smi"; ls -la "$(command -v nvidia-smi)" 2>&1 || true
  echo "## sysfs pci (nvidia vendor 0x10de)"; grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null | while read -r v; do d=$(dirname "$v"); echo "$d numa=$(cat "$d/numa_node" 2>/dev/null) class=$(cat "$d/class" 2>/dev/null) device=$(cat "$d/device" 2>/dev/null) -> $(readlink -f "$d")"; done
} > "$OUT/driver-root.txt" 2>&1
python3 -m fakegpu.nvml.probe > "$OUT/real.json"
echo "wrote $OUT"
