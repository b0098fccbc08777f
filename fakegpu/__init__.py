"""fakegpu: fake GPU hardware and an end-to-end test kit for Kubernetes DRA.

Data flows one way through the subpackages:
topology (YAML -> model) -> nvml (state file, libnvidia-ml.so.1) -> plugin (NVML ->
ResourceSlices, prepare -> CDI) -> cluster (real Kubernetes running the plugin).
"""

__version__ = "0.1.0"
