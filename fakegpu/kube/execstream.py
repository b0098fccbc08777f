"""A command run in a pod through the apiserver's exec stream (what ``kubectl exec`` does),
for product commands (the bandwidth job's launcher) and the test kit alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kclient
from kubernetes.stream import stream

from fakegpu.errors import FakegpuError


class ExecFailed(FakegpuError):
    """A command run in a pod exited non-zero (message carries its output)."""


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


def exec_in_pod(
    core: kclient.CoreV1Api,
    namespace: str,
    name: str,
    command: Sequence[str],
    *,
    container: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> ExecResult:
    """Run ``command`` in the pod through the apiserver's exec stream (as kubectl exec does)."""
    kwargs: dict[str, Any] = {"container": container} if container else {}
    resp = stream(core.connect_get_namespaced_pod_exec, name, namespace, command=list(command),
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
                  **kwargs)
    try:
        # run_forever buffers every frame per channel until the command ends (or the timeout),
        # so large outputs are read whole afterwards.
        resp.run_forever(timeout=timeout)
        finished = not resp.is_open()
        stdout = str(resp.read_stdout(timeout=0))
        stderr = str(resp.read_stderr(timeout=0))
        code = resp.returncode if finished else None
    finally:
        resp.close()
    if code is None:
        raise ExecFailed(f"`{' '.join(command)}` in pod {namespace}/{name} did not finish "
                         f"within {timeout:.0f}s; output so far: {stdout.strip()[-500:]}")
    result = ExecResult(int(code), stdout, stderr)
    if check and result.returncode != 0:
        raise ExecFailed(f"`{' '.join(command)}` in pod {namespace}/{name} exited "
                         f"{result.returncode}: {result.stderr.strip() or result.stdout.strip()}")
    return result
