"""A real loopback HTTP receiver of signed webhooks (a ThreadingHTTPServer in a thread), verifying
every post with the ``standardwebhooks`` library as a receiver would: it records each verified
post (``webhook-id``, parsed body), answers 500 to the first ``fail_first`` posts (after recording
them: a receiver that processed a post and failed to answer), and can be stopped and started again
on the same port."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError


class Receiver:
    """The receiver; :attr:`received` is every verified post, :attr:`refused` every post whose
    signature did not verify."""

    def __init__(self, secret: str, *, fail_first: int = 0, delay: float = 0.0) -> None:
        self.secret = secret
        self.fail_first = fail_first
        self.delay = delay
        self.posts = 0
        self.received: list[tuple[str, dict]] = []
        self.refused: list[str] = []
        self.lock = threading.Lock()
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/outreach"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    data = Webhook(receiver.secret).verify(body, dict(self.headers.items()))
                except WebhookVerificationError as exc:
                    with receiver.lock:
                        receiver.refused.append(str(exc))
                    self.send_response(401)
                    self.end_headers()
                    return
                time.sleep(receiver.delay)
                with receiver.lock:
                    receiver.posts += 1
                    receiver.received.append((self.headers["webhook-id"], data))
                    fail = receiver.posts <= receiver.fail_first
                self.send_response(500 if fail else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def unique(self) -> dict[str, dict]:
        """The posts de-duplicated by ``webhook-id``, as a receiver keeps them."""
        out: dict[str, dict] = {}
        for msg_id, data in self.received:
            out.setdefault(msg_id, data)
        return out
