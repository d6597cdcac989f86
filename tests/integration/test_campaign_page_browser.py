"""The campaign page's preview in a real browser (headless chromium, tests/support/browser.py):
open the page, ask for a preview, pick a lead from the sample list, see its message. The lead's
name is a script and the template itself carries a script and a remote image: in the sandboxed
iframe no script runs and nothing is fetched. The page's real FastAPI app served by uvicorn on
loopback, real PostgreSQL (behind Airflow's login in the deployment:
tests/acceptance/test_operator_ui_deployment.py). Screenshots: the tutorial's
first-campaign-preview.png (shipped templates; support.paths.doc_images), .test-artifacts/
(the hostile one)."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest

from support import browser
from support.flow import import_demo
from support.paths import ROOT, doc_images

ARTIFACTS = ROOT / ".test-artifacts"
HOSTILE = "<script>document.title='ran'</script>"


class Pixel(BaseHTTPRequestHandler):
    """Counts every request: a remote load from the preview would reach it."""

    hits: list[str] = []

    def do_GET(self):  # the http.server API
        Pixel.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/gif")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def pixel():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pixel)
    Pixel.hits = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_browser_picks_a_lead_and_sees_its_preview_with_no_script_run(
        db_url, page_url, pixel, tmp_path, monkeypatch):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    import_demo(db_url, now=dt.datetime.now(dt.UTC))
    driver = browser.chromium(tmp_path / "chromium-profile")
    try:
        wait = WebDriverWait(driver, 60)
        # The shipped templates, the first lead: the tutorial's picture (docs/img/).
        with psycopg.connect(db_url) as conn:
            first = conn.execute("SELECT l.email FROM outreach.leads l JOIN outreach.enrollments "
                                 "en ON en.lead_id = l.id ORDER BY l.id LIMIT 1").fetchone()[0]
        driver.get(f"{page_url}/preview?campaign=q4-ops-intro&step=1&lead={first}")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe.html-part")))
        driver.save_screenshot(str(doc_images() / "first-campaign-preview.png"))

        # A template with a script and a remote image, a lead whose name is a script.
        templates = tmp_path / "templates"
        shutil.copytree(ROOT / "include" / "templates", templates)
        intro = templates / "ops_intro.html.j2"
        intro.write_text(intro.read_text().replace(
            "</body>", "<script>document.body.setAttribute('data-ran', 'yes')</script>"
            f'<img id="remote" src="http://127.0.0.1:{pixel}/pixel.gif"></body>'))
        monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))  # read per render
        with psycopg.connect(db_url) as conn:
            address = conn.execute(
                "SELECT l.email FROM outreach.leads l JOIN outreach.enrollments en "
                "ON en.lead_id = l.id ORDER BY l.id OFFSET 2 LIMIT 1").fetchone()[0]
            conn.execute("UPDATE outreach.leads SET first_name = %s WHERE email = %s",
                         (HOSTILE, address))
        driver.get(f"{page_url}/")
        wait.until(ec.presence_of_element_located((By.ID, "preview-form")))
        driver.find_element(By.CSS_SELECTOR, "#preview-form button[type=submit]").click()
        # No address: the sample list; pick the lead from it.
        wait.until(ec.presence_of_element_located(
            (By.CSS_SELECTOR, f'section[data-address="{address}"] h3 a'))).click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.preview-item")) == 1)
        item = driver.find_element(By.CSS_SELECTOR, "section.preview-item")
        assert item.get_attribute("data-address") == address
        assert driver.find_element(By.CSS_SELECTOR, 'input[name="lead"]').get_attribute(
            "value") == address
        headers = item.find_element(By.CSS_SELECTOR, "table.headers").text
        assert "List-Unsubscribe" in headers and "Message-ID" in headers
        assert f"Hi {HOSTILE}," in item.find_element(By.CSS_SELECTOR, "pre.text-part").text
        frame = item.find_element(By.CSS_SELECTOR, "iframe.html-part")
        assert frame.get_attribute("sandbox") == ""
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "campaign_page_preview.png"))
        driver.switch_to.frame(frame)
        body = wait.until(ec.presence_of_element_located((By.TAG_NAME, "body")))
        assert f"Hi {HOSTILE}," in body.text  # the lead's name is text in the message too
        assert body.get_attribute("data-ran") is None  # the template's script did not run
        assert driver.find_elements(By.ID, "remote")  # the image is there, never loaded
        driver.switch_to.default_content()
        assert driver.title == "outreach: preview"  # the lead's script did not run either
    finally:
        driver.quit()
    time.sleep(0.5)
    assert Pixel.hits == []
