"""The DRA kubelet plugin: NVML (pynvml) -> ResourceSlices; kubelet gRPC prepare -> CDI specs.

Modules, pure ones first: ``discovery`` (pynvml -> dataclasses), ``slices`` (devices ->
ResourceSlice dicts), ``prepare`` (claim allocation -> prepared result), ``cdi``,
``checkpoint``; then the I/O: ``kube`` (apiserver), ``driver`` (locking, state),
``server`` (gRPC adapters, sockets), ``run`` (wiring, signals).
"""
