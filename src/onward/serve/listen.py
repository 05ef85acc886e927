"""The listening socket of ``onward serve``, bound before the server says it is serving.

uvicorn binds only once it starts, after onward printed where it serves, and it exits
with its own code when the port is taken. Binding first makes a taken port, a port the
user may not use or an unknown host a :class:`~onward.errors.UsageError` (exit 2) that
says what to do, before any announcement; uvicorn is then handed the bound socket. With
several server processes, each binds its own on the port (:func:`reserve`).

The socket is made with ``IPPROTO_TCP`` named, not 0: asyncio's loop turns Nagle's
algorithm off (``TCP_NODELAY``) only on connections whose socket says TCP, and a
streamed run's events are small writes one after another, which Nagle holds back until
the client acknowledges the last (up to its delayed ACK, 40 ms on Linux). uvloop (the
serve extra's, except on Windows) turns it off on every TCP connection itself.
"""

from __future__ import annotations

import socket

from onward.errors import UsageError


def bind(host: str, port: int, *, shared: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port`` and (``listen``) listening, as uvicorn would
    bind it. ``shared``: one of several server processes' sockets on the port
    (``SO_REUSEPORT``, see :func:`reserve`)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port; use one from 1 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
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


def reserve(host: str, port: int) -> socket.socket:
    """The port held for server processes that each listen on it with
    :func:`bind` ``(shared=True)``: the kernel spreads new connections over their sockets
    evenly (one listening socket shared by the processes gave each burst of connections
    to whichever process woke first, which accepted all of them). It does not listen
    itself, so it gets no connections. A port in use, by another server with such
    processes too, is :func:`bind`'s error: it is tried without ``SO_REUSEPORT`` first."""
    bind(host, port, listen=False).close()
    return bind(host, port, shared=True, listen=False)


SHARED_PORTS = hasattr(socket, "SO_REUSEPORT")
"""Whether server processes can each listen on the port (Linux, the BSDs, macOS)."""
