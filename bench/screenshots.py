"""`make screenshots`: the run, diff and trend pages in headless Chromium at 1400 px, as PNGs, with the
measurements the page tests check (tests/test_pages.py).

    python bench/screenshots.py OUT [--warehouse WH --run RUN --base RUN]

Without --warehouse it synthesizes a small history (four decode runs of one series, the last two with
10 % slower GEMMs) into OUT/work and reports on it. For each page it writes OUT/<page>.png (the first
screen, 1400 × 900), OUT/<page>-full.png (the whole page, details folded) and OUT/<page>.json (the
measurements: page height, where the headline figures and takeaways end, numbers that wrap).
CHROMIUM (default: chromium on the PATH) is the browser.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDTH, SCREEN = 1400, 900
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
    "--disable-extensions",
]

# Injected into a copy of the page (its CSP removed): measures, then writes JSON into <pre id="measure">.
MEASURE_JS = """
(function () {
  function box(sel) { var e = document.querySelector(sel); if (!e) { return null; }
    var b = e.getBoundingClientRect(); return {top: b.top + window.scrollY, bottom: b.bottom + window.scrollY,
    width: b.width}; }
  var r = {viewport: window.innerWidth, height: document.documentElement.scrollHeight,
           scroll_width: document.documentElement.scrollWidth,
           cards: box(".cards"), takeaways: box(".takeaways"), regressions: box("#regressions"),
           headline: box("#headline"), first_table: box("table")};
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var wrapped = [], cells = 0;
  document.querySelectorAll("td.num, td.n, th.num").forEach(function (td) {
    var text = td.textContent.trim(); if (!text) { return; } cells += 1;
    var range = document.createRange(); range.selectNodeContents(td);
    var tops = {}; Array.prototype.forEach.call(range.getClientRects(), function (q) {
      if (q.width > 0) { tops[Math.round(q.top)] = 1; } });
    if (Object.keys(tops).length > 1) { wrapped.push(text); }
  });
  r.number_cells = cells; r.wrapped_numbers = wrapped;
  r.open_height = document.documentElement.scrollHeight;
  r.open_scroll_width = document.documentElement.scrollWidth;
  var pre = document.createElement("pre"); pre.id = "measure"; pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
})();
"""


def chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _run(browser: str, args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )


def measure(page: Path, browser: str, work: Path) -> dict:
    """The page's layout at 1400 px: height folded and open, the boxes of the headline parts, and the
    number cells whose text wraps onto a second line."""
    html = page.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1)
    html = html.replace("</body>", f"<script>{MEASURE_JS}</script></body>")
    probe = work / f"{page.stem}.measure.html"
    probe.write_text(html, encoding="utf-8")
    out = _run(browser, [f"--window-size={WIDTH},{SCREEN}", "--dump-dom", probe.as_uri()], work / "profile-m")
    found = re.search(r'<pre id="measure">(.*?)</pre>', out.stdout, re.DOTALL)
    if not found:
        raise RuntimeError(f"no measurement from {page}: {out.stderr[-800:]}")
    import html as htmllib

    return json.loads(htmllib.unescape(found.group(1)))


def shoot(page: Path, out: Path, browser: str, work: Path) -> dict:
    m = measure(page, browser, work)
    _run(
        browser,
        [f"--window-size={WIDTH},{SCREEN}", f"--screenshot={out / (page.stem + '.png')}", page.as_uri()],
        work / "profile-s",
    )
    _run(
        browser,
        [
            f"--window-size={WIDTH},{m['height']}",
            f"--screenshot={out / (page.stem + '-full.png')}",
            page.as_uri(),
        ],
        work / "profile-f",
    )
    (out / f"{page.stem}.json").write_text(json.dumps(m, indent=1))
    return m


def synthesize(work: Path) -> tuple[Path, str, str]:
    """Four decode runs of series `screens` (commits c1..c4, the last two with 10 % slower nvjet GEMMs)."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(work / "wh")
    ids = []
    for i in range(4):
        folder = write_scenario(
            "serving-decode",
            work / f"run{i}",
            ranks=2,
            steps=4,
            layers=4,
            seed=i,
            slow_kernel=("nvjet", 1.10) if i >= 2 else None,
        )
        labels = {
            "series": "screens",
            "model": "DeepSeek-R1",
            "commit": f"c{i + 1}",
            "commit_time": f"2026-01-0{i + 1}T00:00:00",
        }
        [outcome] = ingest_paths(wh, [folder], labels)
        ids.append(outcome.run_id)
    return wh.root, ids[-1], ids[0]


def build_pages(warehouse: Path, run: str, base: str, out: Path, where: dict[str, str] | None) -> list[Path]:
    from tracehouse.reports.diff import build_diff, render_diff
    from tracehouse.reports.trend import build_trend, render_trend
    from tracehouse.reports.write import write_run_report
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.engine import open as open_connection
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(warehouse)
    pages = {
        "run": write_run_report(wh, run, "html"),
        "diff": render_diff(build_diff(open_connection(wh), base, run), "html"),
        "trend": render_trend(build_trend(connect(wh), where or {}, [], None, None, warehouse=wh), "html"),
    }
    paths = []
    for name, text in pages.items():
        path = out / f"{name}.html"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--warehouse", type=Path)
    parser.add_argument("--run", default="latest")
    parser.add_argument("--base", default="latest~1")
    parser.add_argument("--where", action="append", default=[], metavar="K=V")
    args = parser.parse_args()
    browser = chromium()
    if not browser:
        print("error: headless Chromium not found (install `chromium` or set CHROMIUM)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.warehouse is None:
            warehouse, run, base = synthesize(args.out / "work")
            where = {"series": "screens"}
        else:
            warehouse, run, base = args.warehouse, args.run, args.base
            where = dict(kv.split("=", 1) for kv in args.where)
        for page in build_pages(warehouse, run, base, args.out, where):
            m = shoot(page, args.out, browser, work)
            print(
                f"{page.stem}: {m['height']} px tall ({m['height'] / SCREEN:.1f} screens), "
                f"{len(m['wrapped_numbers'])} wrapped numbers -> {args.out / (page.stem + '.png')}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
