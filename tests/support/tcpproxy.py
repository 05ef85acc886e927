"""A small TCP proxy on 127.0.0.1 for partition tests: every connection to it is relayed to
a target (a PostgreSQL server) until :meth:`TcpProxy.partition`, which either holds every
byte in both directions with the connections left open (``blackhole``: a network that
drops packets, nobody told) or resets them and refuses new ones (``reset``). Then
:meth:`TcpProxy.heal` relays again; held bytes flow on, as after a partition heals."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._open = threading.Event()
        self._open.set()
        self._refusing = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True, name="tcpproxy").start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def partition(self, mode: str = "blackhole") -> None:
        self._open.clear()
        if mode == "reset":
            self._refusing = True
            with self._lock:
                pairs, self._pairs = self._pairs, []
            for a, b in pairs:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                        s.close()

    def heal(self) -> None:
        self._refusing = False
        self._open.set()

    def close(self) -> None:
        self._stopped = True
        self._open.set()
        self._listener.close()
        with self._lock:
            for a, b in self._pairs:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while not self._stopped:
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for s in ready:
                    self._open.wait()  # a partition holds the bytes here
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
