"""Open a rendered report in a real headless Chromium and check it (no Python dependency).

Talks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (JSON messages
separated by NUL on file descriptors 3 and 4 of the browser), so neither a
websocket client nor a free TCP port is needed. ``check_page`` loads the page
from the file system, waits for its load event, decodes every <img>, collects
console errors, uncaught exceptions and browser log errors (a missing image or a
blocked network request shows up there), and saves a screenshot.

    python -m reports.browser report/index.html --screenshot report/screenshot.png
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")


def find_chromium() -> str | None:
    """``$CHROMIUM`` when set (only it: CHROMIUM=/nonexistent means "no browser"), else the usual paths."""
    env = os.environ.get("CHROMIUM")
    for path in (env,) if env else CHROMIUM_CANDIDATES:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


class BrowserError(RuntimeError):
    pass


@dataclass
class PageCheck:
    url: str
    images: list = field(default_factory=list)        # [{"src", "complete", "width", "height", "shown_width", "error"}]
    console_errors: list = field(default_factory=list)
    exceptions: list = field(default_factory=list)
    log_errors: list = field(default_factory=list)
    title: str = ""
    screenshot: str | None = None
    page_height: int = 0
    boxes: dict = field(default_factory=dict)         # element id -> {"top", "bottom", "text"} (CSS pixels)

    @property
    def broken_images(self) -> list:
        return [i for i in self.images if not i.get("complete") or not i.get("width") or not i.get("height")
                or i.get("error")]

    @property
    def errors(self) -> list:
        return self.console_errors + self.exceptions + self.log_errors


class _Pipe:
    """CDP over the browser's fds 3 (commands in) and 4 (replies and events out)."""

    def __init__(self, write_fd: int, read_fd: int):
        self.w, self.r = write_fd, read_fd
        self.next_id = 0
        self.replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self.r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cond:
                    self.closed = True
                    self.cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self.cond:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0):
        with self.cond:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self.cond:
            while mid not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise BrowserError(f"no reply to {method} ({'browser exited' if self.closed else 'timeout'})")
                self.cond.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events:
                    if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise BrowserError(f"no {method} event ({'browser exited' if self.closed else 'timeout'})")
                self.cond.wait(left)


_BOXES_JS = """Object.fromEntries(%s.map((id) => {
  const e = document.getElementById(id);
  if (!e) return [id, null];
  const r = e.getBoundingClientRect();
  return [id, {top: r.top, bottom: r.bottom, text: e.innerText}];
}).filter(([, v]) => v !== null))"""


def _high_fd(fd: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


_IMAGES_JS = """Promise.all(Array.from(document.images).map(async (img) => {
  let error = null;
  try { await img.decode(); } catch (e) { error = String(e); }
  return {src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth,
          height: img.naturalHeight, shown_width: img.clientWidth, error: error};
}))"""


def check_page(html: str | os.PathLike, *, screenshot: str | os.PathLike | None = None, chromium: str | None = None,
               width: int = 1400, height: int = 1000, full_page_screenshot: str | os.PathLike | None = None,
               timeout: float = 60.0, boxes: tuple[str, ...] = ()) -> PageCheck:
    """Load ``html`` (a local file) in headless Chromium; see the module docstring. ``boxes``: ids
    of elements whose place on the loaded page and shown text to return (what the first screen holds)."""
    chromium = chromium or find_chromium()
    if not chromium:
        raise BrowserError("chromium is not installed (apt-get install -y chromium)")
    url = Path(html).resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="report-chromium-")
    in_r, in_w = (_high_fd(f) for f in os.pipe())     # we write commands -> browser fd 3
    out_r, out_w = (_high_fd(f) for f in os.pipe())   # browser fd 4 -> we read

    def child_fds():
        os.dup2(in_r, 3)
        os.dup2(out_w, 4)

    log = open(Path(profile) / "chromium.log", "wb")
    proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                             "about:blank"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            preexec_fn=child_fds, pass_fds=(3, 4))
    os.close(in_r)
    os.close(out_w)
    pipe = _Pipe(in_w, out_r)
    result = PageCheck(url)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            pipe.send(method, session=session)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        nav = pipe.send("Page.navigate", {"url": url}, session=session, timeout=timeout)
        if nav.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {nav['errorText']}")
        pipe.wait_event("Page.loadEventFired", session, timeout)
        images = pipe.send("Runtime.evaluate", {"expression": _IMAGES_JS, "awaitPromise": True,
                                                "returnByValue": True}, session=session, timeout=timeout)
        result.images = images.get("result", {}).get("value") or []
        result.title = pipe.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                                 session=session)["result"].get("value", "")
        result.page_height = int(pipe.send("Runtime.evaluate", {
            "expression": "document.documentElement.scrollHeight", "returnByValue": True},
            session=session)["result"].get("value", 0))
        if boxes:
            result.boxes = pipe.send("Runtime.evaluate", {"expression": _BOXES_JS % json.dumps(list(boxes)),
                                                          "returnByValue": True}, session=session)["result"].get("value") or {}
        if screenshot is not None:
            shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session, timeout=timeout)
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
            result.screenshot = str(screenshot)
        if full_page_screenshot is not None:
            shot = pipe.send("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": min(result.page_height, 16000), "scale": 0.5}},
                session=session, timeout=timeout)
            Path(full_page_screenshot).write_bytes(base64.b64decode(shot["data"]))
        time.sleep(0.2)     # late console messages
        with pipe.cond:
            events = list(pipe.events)
        for ev in events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                result.console_errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = params.get("exceptionDetails", {})
                result.exceptions.append(d.get("exception", {}).get("description") or d.get("text", ""))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                e = params["entry"]
                result.log_errors.append(f"{e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())
        try:
            pipe.send("Browser.close", timeout=5)
        except BrowserError:
            pass
    finally:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(in_w)
        os.close(out_r)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
    return result


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m reports.browser", description="check a report in headless Chromium")
    parser.add_argument("html")
    parser.add_argument("--screenshot")
    parser.add_argument("--full-page")
    args = parser.parse_args(argv)
    res = check_page(args.html, screenshot=args.screenshot, full_page_screenshot=args.full_page)
    print(f"{len(res.images)} images, {len(res.broken_images)} broken, {len(res.errors)} errors")
    for e in res.errors:
        print("  error:", e)
    for i in res.broken_images:
        print("  broken image:", i)
    return 1 if res.errors or res.broken_images else 0


if __name__ == "__main__":
    raise SystemExit(main())
