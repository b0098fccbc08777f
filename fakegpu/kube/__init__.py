"""Kubernetes' API, one way for every part of fakegpu.

- ``resource``: which ``resource.k8s.io`` version to speak (pure, no client import);
- ``errors``: what a failed call raises, one vocabulary (``KubeError``: ``NotFound``,
  ``Conflict``, ``Forbidden``, ``Invalid``, ``Unreachable``), mapped once from the client's;
- ``api``: the official ``kubernetes`` client: connecting, reads and writes the cluster
  providers, the plugin and the test kit need;
- ``pods``, ``namespaces``, ``events``: create, read, wait, exec (the API's stream), logs.
"""
