"""The embedded provider: a real multi-node Kubernetes of host processes, no containers.

``provider.py`` is the protocol; ``bringup.py`` its steps, ``state.py`` what it records,
``member.py`` one node and its components (EmbeddedNode), ``teardown.py`` the one cleanup path.
"""
