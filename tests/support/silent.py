"""A TCP port on loopback that accepts connections and never sends a byte: a relay or an
identity provider that hangs after the connect."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def silent_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """Yield ``(port, accepted)``: the port, and every connection taken so far (kept open)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], held
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        listener.close()
