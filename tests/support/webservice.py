"""A web app of ours served by uvicorn in a thread on loopback, for tests that speak real HTTP."""

from __future__ import annotations

import threading
import time

import uvicorn

from outreach.dev.devsmtp import free_port


class RunningService:
    """uvicorn serving the app in a thread on 127.0.0.1 and a free port."""

    def __init__(self, app) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> RunningService:
        self.thread.start()
        for _ in range(500):  # wait for readiness (bounded), not for a time
            if self.server.started:
                return self
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"
