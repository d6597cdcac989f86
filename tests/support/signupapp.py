"""Transactional mail's fixtures: a database whose mailboxes include the transactional one
(``tx_url``), the example signup application (examples/signup_app) run by uvicorn in its own
process (``app_factory``), and the welcome emails one address received."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from outreach.campaign import sync_mailboxes
from outreach.dev.devsmtp import free_port
from support.paths import MAILBOXES, ROOT


@pytest.fixture
def tx_url(db_url: str) -> str:
    """A database with every mailbox of the demo mailbox file (hello@ marked transactional)."""
    sync_mailboxes(db_url, MAILBOXES)
    return db_url


def welcome_messages(server, to: str = "jo@example.com") -> list:
    return [m for m in server.messages() if (m["X-RcptTo"] or m["To"] or "").lower().endswith(to)]


class App:
    """examples/signup_app run by uvicorn in a subprocess."""

    def __init__(self, url: str, tmp_path, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "OUTREACH_DATABASE_URL": url, "OUTREACH_HOME": str(ROOT),
                    "AIRFLOW_HOME": str(tmp_path / "airflow-home"), **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples" / "signup_app"),
             "app:app", "--port", str(self.port), "--log-level", "warning"],
            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the example app exited: {self.proc.stdout.read()}")
            try:
                httpx.get(self.base + "/docs", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError("the example app did not start")

    def output(self) -> str:
        """Stop the app and return what it printed (for a failing assertion)."""
        self.stop()
        return self.proc.stdout.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def app_factory(tx_url, tmp_path):
    apps: list[App] = []

    def start(**env: str) -> App:
        apps.append(App(tx_url, tmp_path, **env))
        return apps[-1]

    yield start
    for a in apps:
        a.stop()
