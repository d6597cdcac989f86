"""A TCP relay in front of the real PostgreSQL that lets the first ``n`` connections through and
drops every later one at once: the database going away between two transactions, as a client sees
it (psycopg's own ``OperationalError`` on connect), without stopping the server other tests use."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def cut_after(db_url: str, n: int) -> Iterator[str]:
    """Yield ``db_url`` pointed at a relay on loopback that passes ``n`` connections, then drops.

    The upstream is the URL's TCP host and port, or its Unix socket (a ``host=/dir``, as
    pgserver's have); the URL may be a libpq URI or key=value string."""
    info = conninfo_to_dict(db_url)
    host, port_up = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)

    def upstream() -> socket.socket:
        if host.startswith("/"):
            s = socket.socket(socket.AF_UNIX)
            s.connect(f"{host}/.s.PGSQL.{port_up}")
            return s
        return socket.create_connection((host, port_up))

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    passed = 0
    stop = threading.Event()

    def serve() -> None:
        nonlocal passed
        listener.settimeout(0.2)  # closing a listener does not wake a blocked accept()
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if passed >= n:
                client.close()
                continue
            passed += 1
            server = upstream()
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield make_conninfo(**{**info, "host": "127.0.0.1", "port": str(port)})
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)
