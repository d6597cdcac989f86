"""Debian's chromium, headless, driven by Selenium through Debian's chromium-driver (both from
apt, installed by `make browser`; nothing is downloaded at test time)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,2400")


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
