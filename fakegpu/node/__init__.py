"""What runs on a node of any cluster beside the kubelet: the plugin pod's entrypoint (render the
node's fake NVML, exec the plugin) and its readiness probe. Used by the plugin image (Dockerfile)
and the Helm chart on kind or any other cluster; nothing here knows a cluster provider.
"""
