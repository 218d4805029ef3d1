"""Looking at a page as a person would: Debian's chromium (hack/ensure-chromium.sh), headless,
driven by playwright (which never downloads a browser of its own here), with every request that is
not the page's own file refused and recorded, so a page that needs the network shows it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page, Route, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
# What this machine's closed network and a root user need (docs: env/machines/polyglot.md).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# What each rendered plotly plot holds: its size, its drawn points with their fill colour, and the
# annotation texts, read from the SVG the browser drew (not from the page's source).
_PLOTS_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => {
  const box = plot.getBoundingClientRect();
  const points = Array.from(plot.querySelectorAll('path.point'));
  return {
    id: plot.id,
    width: box.width,
    height: box.height,
    fills: points.map(p => getComputedStyle(p).fill),
    lines: plot.querySelectorAll('.scatterlayer path.js-line').length,
    annotations: Array.from(plot.querySelectorAll('.annotation-text')).map(a => a.textContent),
    annotationBoxes: Array.from(plot.querySelectorAll('.annotation-text')).map(a => {
      const r = a.getBoundingClientRect();
      return {text: a.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    }),
    box: {left: box.left, right: box.right, top: box.top, bottom: box.bottom},
    bars: Array.from(plot.querySelectorAll('.barlayer .point path'))
      .map(p => getComputedStyle(p).fill),
    xticks: Array.from(plot.querySelectorAll('.xtick text')).map(t => t.textContent),
    shapes: Array.from(plot.querySelectorAll('.shapelayer path'))
      .map(p => ({fill: getComputedStyle(p).fill, stroke: getComputedStyle(p).stroke})),
  };
})
"""


@dataclass
class Rendered:
    """What the browser drew."""

    plots: list[dict[str, Any]]
    text: str
    # Rows of the failures table (its header aside).
    failure_rows: int = 0
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # How many elements each CSS selector of look_at's `count` matched (e.g. the trend lines).
    counts: dict[str, int] = field(default_factory=dict)

    def plot(self, plot_id: str) -> dict[str, Any]:
        found = [p for p in self.plots if p["id"] == plot_id]
        assert found, f"no plot {plot_id!r} rendered; rendered: {[p['id'] for p in self.plots]}"
        return found[0]


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: run `make browser` (hack/ensure-chromium.sh)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def look_at(
    page_file: Path,
    screenshot: Path,
    *,
    width: int = 1280,
    height: int = 1600,
    element: str | None = None,
    count: tuple[str, ...] = (),
    full_page: bool = False,
) -> Rendered:
    """Open `page_file`, wait for its plots to be drawn, screenshot the first `height` pixels
    (or the `element` a CSS selector names, wherever it is on the page, or with `full_page` the
    whole page)."""
    refused: list[str] = []
    errors: list[str] = []

    def refuse(route: Route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with chromium() as browser:
        page: Page = browser.new_page(viewport={"width": width, "height": height})
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.route("**/*", refuse)
        page.goto(page_file.resolve().as_uri())
        page.wait_for_load_state("load")
        page.wait_for_function(
            "document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
            "document.querySelectorAll('.plot').length"
        )
        if element is None:
            page.screenshot(path=str(screenshot), full_page=full_page)
        else:
            page.locator(element).screenshot(path=str(screenshot))
        return Rendered(
            plots=page.evaluate(_PLOTS_JS),
            text=page.inner_text("body"),
            failure_rows=page.locator("#failures tbody tr").count(),
            refused=refused,
            errors=errors,
            counts={selector: page.locator(selector).count() for selector in count},
        )
