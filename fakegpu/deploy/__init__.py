"""What fakegpu installs on a cluster besides the plugin itself, for Python.

``files/`` is the Helm chart's ``deploy/helm/fakegpu/files`` (a link in the source tree, real
files in a wheel): the plugin's service account, RBAC, admission policy and DeviceClasses. The
chart includes them, and :mod:`fakegpu.deploy.manifests` renders the same files for the
embedded provider and ``fakegpu plugin deviceclass``, so every cluster gets the same objects.
"""
