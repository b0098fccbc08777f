"""Helpers for end-to-end suites that also work without pytest.

The pytest plugin (``fakegpu.pytest_plugin``) is a thin layer over these modules; scripts and
other test runners can import them directly:

- ``wait``: one polling loop with a timeout, a poll interval and a transient-error policy;
- ``k8s``: API client, namespaces, pod waits, exec, logs, manifests, diagnostics;
- ``dra``: the served ``resource.k8s.io`` version, builders for claims and pods, and the
  devices slices publish and claims get;
- ``gpus``: what the fake NVML library reports for a node (via pynvml in a subprocess), and
  the GPUs a pod's environment says it was given;
- ``prereq``: which host prerequisites of a provider are missing (a pure function + a probe).
"""
