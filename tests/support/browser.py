"""Debian's chromium, headless, driven by Selenium through Debian's chromium-driver (both from
apt, installed by `make browser`; nothing is downloaded at test time), and the campaign page's
app served on loopback for it (fixture ``page_url``, a pytest plugin of tests/conftest.py)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,2400")


@pytest.fixture
def page_url(db_url, settings):
    """The base URL of the campaign page's real FastAPI app (:func:`outreach.web.campaign_page.
    create_app`) served by uvicorn on a free loopback port, on this test's database and settings
    (no login: the deployment's is tested in tests/acceptance/test_operator_ui_deployment.py)."""
    import uvicorn

    from outreach.web.campaign_page import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(
        create_app(lambda: db_url, settings=lambda: settings), host="127.0.0.1", port=port,
        log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def chromium(profile: Path):
    """Return a Selenium driver for a headless chromium with a fresh profile in ``profile``.

    Skips the test when chromium or chromium-driver is not installed (``make browser``).
    """
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (make browser)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def log_in(driver, base_url: str, user: str, password: str, then: str, timeout: float = 60) -> None:
    """Log in through Airflow's login page (the FAB auth manager's form at ``/auth/login/``),
    then open ``then``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base_url}/auth/login/")
    wait = WebDriverWait(driver, timeout)
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit], button[type=submit]").click()
    wait.until(lambda d: d.get_cookie("_token") is not None)
    driver.get(then)


def figures(driver) -> dict[str, str]:
    """Return every figure of the page: ``{data-k: text}``."""
    from selenium.webdriver.common.by import By

    return {td.get_attribute("data-k"): td.text for td in
            driver.find_elements(By.CSS_SELECTOR, "td[data-k]")}
