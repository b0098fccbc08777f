"""The compute-domain plugin container's entrypoint (kind, the Helm chart): the node's fake
NVML as the GPU plugin's entrypoint finds or renders it (the same hostPath state file, so a
fault injected there is seen by both plugins), then exec ``fakegpu computedomain plugin``.

Usage: ``python -m fakegpu.computedomain.entrypoint [PLUGIN ARGS...]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    from fakegpu.errors import FakegpuError
    from fakegpu.node.entrypoint import exec_fakegpu, plugin_env

    try:
        env, node = plugin_env(os.environ)
    except FakegpuError as err:
        print(f"fakegpu compute-domain entrypoint: {err}", file=sys.stderr)
        return err.exit_code
    return exec_fakegpu("compute-domain entrypoint", f"node {node}", env, "computedomain",
                        "plugin", "--node", node, *argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
