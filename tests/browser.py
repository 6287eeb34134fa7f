"""Headless Chromium driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`: commands on
the child's fd 3, replies and events on its fd 4, each message JSON ended by a NUL byte). No extra package:
one browser serves a whole test module, pages load in real time (load times are real), clicks are trusted
input events, and screenshots can be clipped to one element.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--enable-unsafe-swiftshader",  # software WebGL without a deprecation notice (plotly probes WebGL)
)


class BrowserError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


class Browser:
    """One headless Chromium and one page (tab) in it."""

    def __init__(self, binary: Path, profile: Path, width: int = 1400, height: int = 1000) -> None:
        to_child_read, self._to_child = os.pipe()
        self._from_child, from_child_write = os.pipe()

        def plumb() -> None:  # the child's fd 3 reads our commands, its fd 4 writes its replies
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_read, from_child_write)]
            for wanted, fd in zip((3, 4), high, strict=True):  # via fds above 9: neither end is 3 or 4 now
                os.dup2(fd, wanted)

        self._process = subprocess.Popen(
            [str(binary), *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=plumb,  # noqa: PLW1509 (the test process is single-threaded here)
            pass_fds=(3, 4),  # kept open after the fds above 2 are closed (they are the ones `plumb` made)
        )
        os.close(to_child_read)
        os.close(from_child_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self._page_target()
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _page_target(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pages = [t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            if pages:
                return str(pages[0]["targetId"])
            time.sleep(0.05)
        raise BrowserError("no page target")

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError("the browser did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError("the browser closed its pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        found: dict[str, Any] = json.loads(message)
        return found

    def send(
        self, method: str, session: str | None = None, timeout: float = 60, **params: Any
    ) -> dict[str, Any]:
        """Send one command and wait for its reply (events received meanwhile are kept in `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """A command to the page."""
        return self.send(method, self._session, timeout, **params)

    def wait_event(self, method: str, timeout: float = 60) -> dict[str, Any]:
        """Wait for the page's next `method` event (one already received counts)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(index)
            self.events.append(self._read_message(deadline))

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to `url` and wait for its load event."""
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        reply = self.call(
            "Runtime.evaluate", timeout, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression[:80]}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"never true: {expression}")

    def click(self, x: float, y: float) -> None:
        """A trusted left click at viewport coordinates: move there, let the page see the hover (plotly finds
        the point under the mouse on a throttled hover), press, release."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        time.sleep(0.15)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, target: Path, selector: str | None = None) -> Path:
        """A PNG of the viewport, or of the element `selector` (scrolled to) when given."""
        params: dict[str, Any] = {"format": "png"}
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=0, y=0)  # no hover label left behind
        if selector:
            box = self.evaluate(
                f"(function () {{ var el = document.querySelector({json.dumps(selector)}); "
                f"el.scrollIntoView();"
                " var r = el.getBoundingClientRect();"
                " return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()"
            )
            params["clip"] = {**box, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        target.write_bytes(base64.b64decode(data))
        return target

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and the browser's own error log since the last
        call (a content-security violation or a blocked request is logged there)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"].get("exception", {}).get("description")))
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(params["entry"]["text"])
        self.events = [e for e in self.events if e.get("method") == "Page.loadEventFired"]
        return found

    def close(self) -> None:
        """End the browser (it is this test's own child process)."""
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close", timeout=10)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_child)
        os.close(self._from_child)


PROBE = """
window.__tv = {alerts: [], blocked: []};
window.alert = window.confirm = window.prompt = function (m) { window.__tv.alerts.push(String(m)); };
document.addEventListener("securitypolicyviolation", function (e) {
  window.__tv.blocked.push(e.violatedDirective + " " + e.blockedURI);
});
"""
"""Runs before any script of every page: dialogs and content-security violations are recorded, not shown."""

STATE = """(function (verdictId) {
  function box(el) {
    var r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height};
  }
  var verdict = document.getElementById(verdictId);
  return {
    alerts: window.__tv.alerts, blocked: window.__tv.blocked,
    resources: performance.getEntriesByType("resource").map(function (e) { return e.name; }),
    images: document.images.length, innerHeight: window.innerHeight,
    verdict: verdict ? {text: verdict.innerText, box: box(verdict),
                        visibility: getComputedStyle(verdict).visibility,
                        display: getComputedStyle(verdict).display} : null,
    figures: Array.prototype.map.call(document.querySelectorAll("div.figure[id^='fig-']"), function (el) {
      var svg = el.querySelector(".main-svg");
      return {id: el.id, plotly: el.classList.contains("js-plotly-plot"),
              traces: el.data ? el.data.length : 0,
              bars: el.querySelectorAll(".point").length, box: box(el), svg: svg ? box(svg) : null,
              title: el.layout && el.layout.title ? el.layout.title.text : null};
    })
  };
})"""
"""A page's state as a test reads it: dialogs, blocked requests, every figure drawn (`STATE(verdictId)`)."""

BENIGN = ("GL Driver Message",)
"""Browser log lines that are not the page's problems (software WebGL's performance notes)."""


def chromium_or_skip(binary: Path) -> Path:
    """`binary` when it exists; else a skip, or under CI (`CI` set) a failure."""
    import pytest

    if not binary.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{binary} is missing under CI: .ci/run must install Debian's chromium")
        pytest.skip(f"{binary} not installed (apt-get install chromium)")
    return binary


def page_state(browser: Browser, verdict_id: str = "verdict-sentence") -> dict[str, Any]:
    """`STATE` of the open page, with `problems`: its console errors and warnings, script errors and the
    browser's error log, less `BENIGN` lines."""
    state: dict[str, Any] = browser.evaluate(f"{STATE}({json.dumps(verdict_id)})")
    state["problems"] = [p for p in browser.problems() if not any(b in p for b in BENIGN)]
    return state


def assert_clean(state: dict[str, Any]) -> None:
    """Nothing went wrong: no error, no dialog, no request, no image, every figure drawn by plotly."""
    assert state["problems"] == [], state["problems"]
    assert state["blocked"] == [], state["blocked"]
    assert state["resources"] == [], state["resources"]
    assert state["alerts"] == []
    assert state["images"] == 0
    for figure in state["figures"]:
        assert figure["plotly"], figure
        assert figure["traces"] > 0, figure
        assert figure["svg"], figure
        assert min(figure["svg"]["width"], figure["svg"]["height"]) > 100, figure
