"""The socket ``onward serve`` listens on: its connections stream without Nagle's delay.

A streamed run's events are small writes one after another; with Nagle's algorithm on,
each waits for the client's acknowledgement of the last (its delayed ACK: 40 ms on
Linux). uvicorn serves on the socket :func:`onward.serve.listen.bind` made through the
loop's ``create_server(sock=...)``, as here, on each loop it may run on.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable

import pytest

from onward.serve.listen import bind, reserve

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
"""The loops uvicorn may serve on: uvloop wherever the serve extra installs it."""
if sys.platform != "win32":
    import uvloop

    LOOPS["uvloop"] = uvloop.new_event_loop


def _accepted_nodelay(sock: socket.socket, loop: Callable[[], asyncio.AbstractEventLoop]) -> int:
    """TCP_NODELAY of a connection the loop's server accepted on ``sock``."""
    port = sock.getsockname()[1]

    async def main() -> int:
        got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Seen(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                raw = transport.get_extra_info("socket")
                got.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Seen, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(got, 10)
            finally:
                writer.close()

    with asyncio.Runner(loop_factory=loop) as runner:
        return runner.run(main())


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_served_connection_sends_each_event_at_once(loop: str) -> None:
    assert _accepted_nodelay(bind("127.0.0.1", 0), LOOPS[loop]) != 0


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_each_of_several_processes_sockets_sends_each_event_at_once(loop: str) -> None:
    with reserve("127.0.0.1", 0) as held:
        shared = bind("127.0.0.1", held.getsockname()[1], shared=True)
        assert _accepted_nodelay(shared, LOOPS[loop]) != 0
