"""The listening socket of ``onward serve``, bound before the server says it is serving.

uvicorn binds only once it starts, after onward printed where it serves, and it exits
with its own code when the port is taken. Binding first makes a taken port, a port the
user may not use or an unknown host a :class:`~onward.errors.UsageError` (exit 2) that
says what to do, before any announcement; uvicorn is then handed the bound socket.
"""

from __future__ import annotations

import socket

from onward.errors import UsageError


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, as uvicorn would bind it."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port; use one from 1 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        raise UsageError(
            f"cannot listen on {host}:{port} ({why}); stop the process using that port, "
            "or pass another --port (or --host)"
        ) from None
    sock.set_inheritable(True)
    return sock
