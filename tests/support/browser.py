"""The operator console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``./engram``) driven by Selenium, and a page object over it.
Selenium never downloads a browser or a driver: both paths are given, and Selenium Manager is
kept offline. Selenium is imported only when a browser starts (it is a dev requirement)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session

CHROMIUM = os.environ.get("ENGRAM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ENGRAM_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1100",
]  # fmt: skip
PASSWORD = "console-test-pw-91"

try:
    import selenium  # noqa: F401

    _missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() and os.access(p, os.X_OK))]
    SKIP_REASON = f"{', '.join(_missing)} not installed (apt-get install chromium chromium-driver)" if _missing else ""
except ImportError:
    SKIP_REASON = "selenium is not installed (pip install -r requirements-dev.txt)"


def chromium(profile: Path):
    """Headless Chromium under Selenium, its profile in ``profile``; quit() it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    # The browser's console log: Chromium reports each Content-Security-Policy violation there.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(90)
    return driver


class Console:
    """The browser, the live server and a screenshot folder for one test."""

    def __init__(self, driver, base_url: str, name: str):
        self.driver = driver
        self.base = base_url
        self.shots = Path(settings.ENGRAM_HOME) / "screenshots" / "console" / name
        shutil.rmtree(self.shots, ignore_errors=True)
        self.shots.mkdir(parents=True)
        self.count = 0
        driver.delete_all_cookies()

    def open(self, path: str) -> None:
        self.assert_no_csp_violation()
        self.driver.get(self.base + path)

    def assert_no_csp_violation(self) -> None:
        """Nothing on the pages shown since the last call was refused by the
        Content-Security-Policy (a script, style or image that would not load or run)."""
        refused = [e["message"] for e in self.driver.get_log("browser") if "Content Security Policy" in e["message"]]
        assert refused == [], "\n".join(refused)

    def find(self, css: str):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))

    def all(self, css: str) -> list:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def click(self, css: str) -> None:
        """Click and wait until the next page has loaded (a mark left on the old page's
        window is gone, and the new document is complete)."""
        from selenium.webdriver.support.ui import WebDriverWait

        self.assert_no_csp_violation()
        self.driver.execute_script("window.__engramOldPage = true;")
        self.find(css).click()
        WebDriverWait(self.driver, 60).until(
            lambda d: d.execute_script("return !window.__engramOldPage && document.readyState === 'complete';")
        )
        self.find("body")

    def wait_for_url(self, part: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, 30).until(lambda d: part in d.current_url)
        self.find("body")

    def type(self, css: str, text: str) -> None:
        element = self.find(css)
        element.clear()
        element.send_keys(text)

    def select(self, css: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.find(css)).select_by_value(value)

    def text(self, css: str = "body") -> str:
        return self.find(css).text

    def shot(self, label: str) -> Path:
        self.count += 1
        path = self.shots / f"{self.count:02d}-{label}.png"
        self.driver.save_screenshot(str(path))
        return path

    def login(self, user: User) -> None:
        self.open("/admin/login/?next=/admin/")
        self.type("#id_username", user.username)
        self.type("#id_password", PASSWORD)
        self.shot("login")
        self.click("input[type=submit]")
        assert "operator console" in self.text("#console-panel").lower()
        # The database holds the operator's session.
        sessions = [s.get_decoded() for s in Session.objects.all()]
        assert any(s.get("_auth_user_id") == str(user.pk) for s in sessions)

    def report(self) -> None:
        print(f"\nscreenshots: {self.shots} ({self.count} files)")
