"""A person at headless Chromium, driven over WebDriver (chromedriver) with plain HTTP calls.

Standard library only, so it runs in any of the test venvs. Used by the OAuth tests
(oauth_client.py, tests/conformance/authorization.py): the person signs in to the console
with a human key, allows an app on the consent page, and revokes it under Connected apps.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C element reference key
# How long to wait for a page element or a page load (a bound, not a measurement).
WAIT_SECS = 20.0


class BrowserError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One chromedriver process and one headless Chromium session with a fresh profile."""

    def __init__(self, chromium: str | None = None, chromedriver: str | None = None) -> None:
        chromium = chromium or os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
        chromedriver = chromedriver or os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
        if not chromedriver or not os.path.exists(chromium):
            raise BrowserError("chromium and chromedriver are needed (apt-get install chromium chromium-driver)")
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="ithaca-browser-")
        self.log = open(os.path.join(self.profile, "chromedriver.log"), "w")
        self.driver = subprocess.Popen(
            [chromedriver, f"--port={self.port}"], stdout=self.log, stderr=subprocess.STDOUT
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._call("GET", "/status").get("ready"):
                    break
            except (OSError, BrowserError):
                pass
            if time.monotonic() > deadline or self.driver.poll() is not None:
                self.close()
                raise BrowserError("chromedriver did not start")
            time.sleep(0.1)
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1280,900",
            f"--user-data-dir={os.path.join(self.profile, 'chromium')}",
        ]
        caps = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": chromium, "args": args}}}
        value = self._call("POST", "/session", {"capabilities": caps})
        self.session = f"/session/{value['sessionId']}"

    # ------------------------------------------------------------------ WebDriver wire
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                reply = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read()).get("value", {})
            except ValueError:
                err = {}
            raise BrowserError(f"{method} {path}: {err.get('error', e.code)}: {err.get('message', '')[:300]}") from None
        return reply.get("value")

    def _s(self, method: str, path: str, body: Any = None) -> Any:
        return self._call(method, self.session + path, body)

    def close(self) -> None:
        try:
            if hasattr(self, "session"):
                self._call("DELETE", self.session)
        except (OSError, BrowserError):
            pass
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ what a person does
    def goto(self, url: str) -> None:
        self._s("POST", "/url", {"url": url})

    def url(self) -> str:
        return self._s("GET", "/url")

    def js(self, script: str, *args: Any) -> Any:
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        """The element matching `css`, waiting for it to appear."""
        deadline = time.monotonic() + WAIT_SECS
        while True:
            try:
                return self._s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]
            except BrowserError as e:
                if "no such element" not in str(e) or time.monotonic() > deadline:
                    raise BrowserError(f"no {css} on {self.url()}: {e}; page text: {self.page_text()[:500]!r}")
            time.sleep(0.1)

    def present(self, css: str) -> bool:
        return bool(self.js("return document.querySelector(arguments[0]) !== null", css))

    def text(self, css: str) -> str:
        return self._s("GET", f"/element/{self.find(css)}/text")

    def fill(self, css: str, value: str) -> None:
        self._s("POST", f"/element/{self.find(css)}/value", {"text": value})

    def page_text(self) -> str:
        try:
            return self.js("return document.body ? document.body.innerText : ''") or ""
        except BrowserError:
            return ""

    def mark(self) -> None:
        """Mark the current document, so `new_page` can tell when another one has loaded."""
        self.js("window.__stale = true; return true")

    def new_page(self) -> None:
        deadline = time.monotonic() + WAIT_SECS
        while True:
            try:
                if self.js("return !window.__stale && document.readyState === 'complete'"):
                    return
            except BrowserError as e:
                if "alert" not in str(e):
                    raise
            if time.monotonic() > deadline:
                raise BrowserError(f"no new page after {self.url()}")
            time.sleep(0.1)

    def click(self, css: str, confirm: bool = False) -> None:
        """Click `css` and wait for the page it loads; `confirm` accepts the dialog it opens."""
        element = self.find(css)
        self.mark()
        self._s("POST", f"/element/{element}/click", {})
        if confirm:
            deadline = time.monotonic() + WAIT_SECS
            while True:
                try:
                    self._s("POST", "/alert/accept", {})
                    break
                except BrowserError as e:
                    if "no such alert" not in str(e) or time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
        self.new_page()

    def sign_in_if_asked(self, human_key: str) -> bool:
        """On the console's sign-in page, sign in with `human_key`; whether it was asked."""
        if "/console/sign-in" not in self.url():
            return False
        self.fill("#key", human_key)
        self.click("#sign-in")
        if self.present("#sign-in-error"):
            raise BrowserError(f"sign-in refused: {self.text('#sign-in-error')}")
        return True

    def consent(self, human_key: str, decision: str = "allow") -> dict[str, str]:
        """At an `/authorize` URL already loaded: sign in if asked, then decide on the consent
        page. What the page showed (client name, id, redirect host, tenant, scopes)."""
        signed_in = self.sign_in_if_asked(human_key)
        self.find("#consent")
        shown = {
            "client_name": self.text("#client-name"),
            "client_id": self.text("#client-id"),
            "redirect_host": self.text("#redirect-host"),
            "tenant": self.text("#tenant"),
            "scopes": " ".join(
                self.js("return [...document.querySelectorAll('input[name=allow]:checked')].map(e => e.value)")
            ),
            "signed_in_here": str(signed_in).lower(),
        }
        self.click(f"#{decision}")
        return shown

    def revoke_app(self, console_url: str, human_key: str, client_id: str) -> int:
        """Revoke, on Connected apps, every live grant of `client_id`; how many were revoked."""
        self.goto(f"{console_url}/console/apps")
        self.sign_in_if_asked(human_key)
        if "/console/apps" not in self.url():
            self.goto(f"{console_url}/console/apps")
        self.find("h2")
        live = (
            "return [...document.querySelectorAll('#apps tbody tr')]"
            ".filter(r => !r.classList.contains('revoked') && r.querySelector('code')"
            " && r.querySelector('code').textContent === arguments[0]).map(r => r.dataset.grant)"
        )
        grants = self.js(live, client_id) or []
        for grant in grants:
            self.click(f"tr[data-grant='{grant}'] form button", confirm=True)
        left = self.js(live, client_id) or []
        if left:
            raise BrowserError(f"grants of {client_id} still live after Revoke: {left}")
        return len(grants)
