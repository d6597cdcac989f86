"""Attack: a receiver that answers one byte at a time holds a post past its lease."""

from __future__ import annotations

import socket
import threading
import time

from test_webhooks import SECRET_VAR, add_events, read_secret, secret  # noqa: F401 (fixture)

from outreach.settings import WebhookSettings
from outreach.webhooks import add_endpoint, deliver, enqueue

DRIP = 12  # bytes, one every 0.9 s: each read is under the 1 s timeout


def _drip_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {DRIP}\r\n\r\n".encode())
                for _ in range(DRIP):
                    time.sleep(0.9)
                    try:
                        conn.sendall(b"x")
                    except OSError:
                        break

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_a_dripping_receiver_cannot_hold_a_post_past_three_timeouts(db_url, secret):  # noqa: F811
    srv, port = _drip_server()
    try:
        add_endpoint(db_url, name="slow", endpoint_url=f"http://127.0.0.1:{port}/hook",
                     event_kinds=["*"], secret_ref=f"env:{SECRET_VAR}", allow_private=True)
        add_events(db_url, ["replied"])
        enqueue(db_url)
        s = WebhookSettings(webhook_timeout=1, webhook_run_seconds=2, webhook_allow_private=True)
        started = time.monotonic()
        deliver(db_url, secret=read_secret, settings=s)
        took = time.monotonic() - started
    finally:
        srv.close()
    # lease_seconds assumes a post lasts at most 3 x the timeout (connect, send, answer).
    assert took < 3 * s.webhook_timeout + 2, f"one post took {took:.1f} s"
