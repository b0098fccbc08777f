"""The compute-domain plugin container's entrypoint (kind, the Helm chart): the node's fake
NVML as the GPU plugin's entrypoint finds or renders it (the same hostPath state file, so a
fault injected there is seen by both plugins), then exec ``fakegpu computedomain plugin``.

Usage: ``python -m fakegpu.computedomain.entrypoint [PLUGIN ARGS...]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str]) -> int:
    from fakegpu.errors import FakegpuError
    from fakegpu.node.entrypoint import plugin_env

    try:
        env, node = plugin_env(os.environ)
    except FakegpuError as err:
        print(f"fakegpu compute-domain entrypoint: {err}", file=sys.stderr)
        return err.exit_code
    fakegpu = str(Path(sys.executable).with_name("fakegpu"))
    args = [fakegpu, "computedomain", "plugin", "--node", node, *argv]
    print(f"fakegpu compute-domain entrypoint: node {node}; exec {' '.join(args)}",
          file=sys.stderr, flush=True)
    os.execve(fakegpu, args, env)  # PID 1's replacement: SIGTERM reaches the plugin
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
