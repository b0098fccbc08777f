"""The instance's readiness over HTTP (``GET /readyz``), for a kubelet ``httpGet`` probe.

Ready means both of this instance's sockets accept connections (what a rolling update needs:
the old instance keeps the node's ResourceSlices only if it sees the new one alive). The
kubelet probes over HTTP itself, so a probe starts no process in the plugin's container; the
exec probe it replaces started a Python interpreter every 2 s on every node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from fakegpu.kubeletplugin.sockets import SocketPaths, socket_alive

log = logging.getLogger(__name__)
PATH = "/readyz"


def serving(paths: SocketPaths) -> tuple[bool, str]:
    """Whether both sockets of the instance accept connections, and what was seen."""
    down = [str(p) for p in (paths.registration, paths.dra) if not socket_alive(p)]
    return (not down, "serving" if not down else "not serving yet: " + ", ".join(down))


Check = Callable[[], tuple[bool, str]]  # ready?, and what was seen


class _Handler(BaseHTTPRequestHandler):
    check: ClassVar[Check]

    def do_GET(self) -> None:
        if self.path != PATH:
            self._answer(404, f"only {PATH} is served")
            return
        ok, why = type(self).check()
        self._answer(200 if ok else 503, why)

    def _answer(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a probe every 2 s: not worth a log line each


class ReadinessEndpoint:
    """``GET /readyz`` on ``port`` of every address of the pod, answered by ``check`` (the
    plugin's: ``serving`` of its sockets); port 0 picks a free one."""

    def __init__(self, check: Check, port: int) -> None:
        handler = type("Handler", (_Handler,), {"check": staticmethod(check)})
        self._server = ThreadingHTTPServer(("", port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="readyz",
                                        daemon=True)
        self._thread.start()
        log.info("readiness on :%d%s", self.port, PATH)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
