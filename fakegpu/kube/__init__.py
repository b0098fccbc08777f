"""Kubernetes' API, one way for every part of fakegpu.

- ``resource``: which ``resource.k8s.io`` version to speak (pure, no client import);
- ``api``: the official ``kubernetes`` client: connecting, reads and writes the cluster
  providers, the plugin and the test kit need.
"""
