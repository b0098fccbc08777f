"""A driver-agnostic conformance suite for DRA drivers (``fakegpu conformance``).

It reads only the Kubernetes API and what a pod sees, never a driver's files, so it runs
against any driver on any cluster: ``fakegpu conformance --kubeconfig K --driver NAME
--device-class CLASS`` or ``pytest --pyargs fakegpu.conformance --fakegpu-conformance-kubeconfig K
...``. Without a kubeconfig it runs inside fakegpu's own pytest session, against the session's
cluster and fakegpu's plugin (``make test``).

A capabilities file says what the driver supports (``capabilities.py``); each check
(``checks.CHECKS``) is reported passed, failed, not applicable (its feature gate is off on the
cluster's release) or not declared (the driver does not claim it): JUnit plus a markdown
table with the cluster's version and gates (``report.py``).
"""
