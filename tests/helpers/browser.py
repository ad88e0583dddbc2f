"""A page as a user sees it: latest.html rendered by a real headless Chromium, its DOM after
rendering and a screenshot (`render`); `CHROMIUM` is None where there is none (the tests that need
it skip with `needs_chromium`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = next(
    (
        found
        for name in ("chromium", "chromium-browser", "google-chrome")
        if (found := shutil.which(name))
    ),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here (Debian: apt-get install chromium)"
)


def chromium(profile: Path, proxy: str = "http://127.0.0.1:9") -> list[str]:
    """Headless Chromium with its profile in `profile`, quiet (no sync, updates or background
    requests), every request sent to `proxy` (by default one where nothing answers: the page must
    need nothing)."""
    return [
        str(CHROMIUM),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--metrics-recording-only",
        "--no-default-browser-check",
        f"--proxy-server={proxy}",
        "--proxy-bypass-list=<-loopback>",
        f"--user-data-dir={profile}",
    ]


def render(page: Path, profile: Path, screenshot: Path, proxy: str | None = None) -> str:
    """Render `page` in headless Chromium (its profile in `profile`, no network, or every request
    sent to `proxy`); write a PNG screenshot to `screenshot` and return the DOM after rendering."""
    common = chromium(profile) if proxy is None else chromium(profile, proxy=proxy)
    shot = subprocess.run(
        [*common, f"--screenshot={screenshot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return subprocess.run(
        [*common, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
