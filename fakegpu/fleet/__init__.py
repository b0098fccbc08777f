"""Fleets: simulated nodes beside real ones (docs/scale.md).

KWOK keeps a simulated node Ready and its pods Running; fakegpu publishes its ResourceSlices
with the plugin's own code from the node's rendered NVML state (``publisher.py``).
"""
