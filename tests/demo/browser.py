"""A page loaded in headless Chromium (Debian's package, `make chromium`), driven over the Chrome DevTools
Protocol: what its console reported, where its elements are, and a full-page PNG screenshot."""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import websocket
from PIL import Image

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-port=0",  # Chromium picks a free port and prints it
    "--remote-allow-origins=*",  # the websocket client's Origin header
)
# Guards against a hung browser only: every wait below ends on an event the browser sends.
HANG_GUARD_SECONDS = 120


@dataclass
class LoadedPage:
    errors: list[str]  # uncaught exceptions, console.error/assert, and browser log errors (CSP, failed loads)
    boxes: dict[str, tuple[int, int, int, int]]  # element id -> (left, top, right, bottom), page pixels
    screenshot: Image.Image  # the whole page, one pixel per CSS pixel


def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} does not exist: `make test` installs Debian's chromium package first (the "
            "Makefile's /usr/bin/chromium target: apt-get install chromium, as root); elsewhere set CHROMIUM "
            "to a Chromium binary."
        )
    return CHROMIUM


def load(url: str, element_ids: list[str], width: int = 1050) -> LoadedPage:
    # Chromium's helper processes may still write to the profile after the browser exits (one CI run:
    # "Directory not empty: 'Default'"): its whole process group is ended, and a late file never fails a test.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            endpoint = _devtools_endpoint(browser)
            return _Session(_page_socket(endpoint)).load(url, element_ids, width)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(browser.pid, signal.SIGTERM)
            browser.wait(HANG_GUARD_SECONDS)


def _devtools_endpoint(browser: subprocess.Popen) -> str:
    """host:port from Chromium's "DevTools listening on ws://host:port/..." line; its stderr is then
    drained in the background so that the browser never blocks on a full pipe."""
    lines = []
    for line in browser.stderr:
        lines.append(line)
        if found := re.search(r"DevTools listening on ws://([^/]+)/", line):
            threading.Thread(target=lambda: browser.stderr.read(), daemon=True).start()
            return found.group(1)
    raise AssertionError(f"{CHROMIUM} exited {browser.wait()} without a DevTools endpoint:\n{''.join(lines)}")


def _page_socket(endpoint: str) -> websocket.WebSocket:
    with urllib.request.urlopen(f"http://{endpoint}/json/list", timeout=HANG_GUARD_SECONDS) as answer:
        targets = json.load(answer)
    page = next(target for target in targets if target["type"] == "page")
    return websocket.create_connection(page["webSocketDebuggerUrl"], timeout=HANG_GUARD_SECONDS)


class _Session:
    def __init__(self, socket: websocket.WebSocket):
        self.socket, self.ids, self.errors = socket, itertools.count(1), []
        self.loaded = False

    def call(self, method: str, **params) -> dict:
        message_id = next(self.ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == message_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message["result"]

    def _receive(self) -> dict:
        message = json.loads(self.socket.recv())
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details["text"])
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append(
                " ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"])
            )
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        elif method == "Page.loadEventFired":
            self.loaded = True
        return message

    def load(self, url: str, element_ids: list[str], width: int) -> LoadedPage:
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=800, deviceScaleFactor=1, mobile=False
        )
        self.call("Page.navigate", url=url)
        while not self.loaded:
            self._receive()
        height = self.evaluate("document.documentElement.scrollHeight")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        boxes = self.evaluate(
            f"Object.fromEntries({json.dumps(element_ids)}.map(id => [id, document.getElementById(id)])"
            ".filter(([, e]) => e).map(([id, e]) => { const r = e.getBoundingClientRect(); "
            "return [id, [r.left, r.top, r.right, r.bottom].map(Math.round)]; }))"
        )
        shot = self.call("Page.captureScreenshot", format="png")["data"]
        image = Image.open(io.BytesIO(base64.b64decode(shot))).convert("RGB")
        return LoadedPage(list(self.errors), {key: tuple(value) for key, value in boxes.items()}, image)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"]["value"]


def colour_pixels(image: Image.Image, box: tuple[int, int, int, int], colour: str, tolerance: int = 6) -> int:
    """Pixels inside `box` within `tolerance` of `colour` (#rrggbb) in every channel."""
    target = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    region = image.crop(box)
    return sum(
        1
        for pixel in region.get_flattened_data()
        if all(abs(channel - want) <= tolerance for channel, want in zip(pixel, target, strict=True))
    )
