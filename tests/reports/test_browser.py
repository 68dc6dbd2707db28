"""The page in a real headless browser: every image decodes, no console errors; a screenshot is
saved next to the report. Skips when Chromium is not installed (CI installs it)."""
from __future__ import annotations

import pytest

from reports.browser import check_page, find_chromium

pytestmark = [pytest.mark.skipif(find_chromium() is None,
                                 reason="chromium is not installed (/usr/bin/chromium); "
                                        "install it with: apt-get install -y chromium")]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_in_headless_chromium(rendered):
    shot = rendered.parent / "screenshot.png"
    res = check_page(rendered, screenshot=shot, full_page_screenshot=rendered.parent / "screenshot-full.png")
    assert res.title.startswith("SwiGLU backward")
    assert len(res.images) >= 10
    assert not res.broken_images, res.broken_images
    assert all(i["width"] > 0 and i["height"] > 0 for i in res.images)
    assert not res.errors, res.errors
    assert shot.read_bytes().startswith(PNG_MAGIC)
    print(f"screenshot: {shot}")


def test_checker_sees_broken_images_and_console_errors(tmp_path):
    """The check itself: a missing image, a corrupt PNG and a console error are all reported."""
    (tmp_path / "bad.png").write_bytes(PNG_MAGIC + b"garbage")
    page = tmp_path / "index.html"
    page.write_text('<!DOCTYPE html><html><head><title>t</title><link rel="icon" href="data:,"></head><body>'
                    '<img src="missing.png"><img src="bad.png">'
                    '<script>console.error("boom")</script></body></html>')
    res = check_page(page)
    assert len(res.broken_images) == 2
    assert any("boom" in e for e in res.console_errors)
    assert any("missing.png" in e or "ERR_FILE_NOT_FOUND" in e for e in res.log_errors), res.log_errors
