"""The one Jinja environment of every report: packaged templates, overridable by a user folder.

Autoescape is on for HTML, so every string that came from a trace is escaped unless a chart helper
built it from numbers and escaped text; StrictUndefined turns a typo in a template into an error.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import jinja2
from markupsafe import Markup

from reports import charts, serving, svg

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_JS = (TEMPLATES / "_page.js").read_text(encoding="utf-8")
# the Content-Security-Policy allows this one inline script, by its hash, and nothing from the network
PAGE_JS_HASH = "sha256-" + base64.b64encode(hashlib.sha256(PAGE_JS.encode()).digest()).decode()


def short_name(name: str | None, width: int = 64) -> str:
    """A kernel name a person can scan: no `void `, no argument list, no `(anonymous namespace)::`; a
    long one keeps its head and tail around `…` (the full name is in the page too: hover or click)."""
    if not name:
        return ""
    text = name.strip()
    text = text.removeprefix("void ")
    text = text.replace("(anonymous namespace)::", "")
    if text.endswith(")"):  # cut the parameter list: the matching `(` of the last `)`
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += (text[i] == ")") - (text[i] == "(")
            if depth == 0:
                text = text[:i] if i > 0 else text
                break
    if len(text) > width:
        head = width * 2 // 3
        text = text[:head] + "…" + text[-(width - head - 1):]
    return text


def environment(html: bool, template_dir: str | Path | None = None) -> jinja2.Environment:
    folders = ([str(template_dir)] if template_dir else []) + [str(TEMPLATES)]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        autoescape=html,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(md=charts.md_cell, ns=charts.fmt_ns, value=charts.fmt_value, spark=charts.sparkline,
                       pct=lambda share: "–" if share is None else f"{100 * share:.1f} %", short=short_name,
                       attr_dict=charts.point_dict)
    env.globals.update(line_chart=charts.line_chart, bar_pair=charts.bar_pair, share_bars=svg.share_bars,
                       step_timeline=svg.step_timeline, layer_strip=svg.layer_strip,
                       latency_chart=serving.latency_chart, roofline_chart=serving.roofline_chart,
                       timeline_legend=svg.timeline_legend, wall_bar=svg.wall_bar, skew_chart=svg.skew_chart,
                       page_js=Markup(PAGE_JS), page_js_hash=PAGE_JS_HASH)
    return env


def render_template(name: str, context, html: bool, template_dir: str | Path | None = None) -> str:
    return environment(html, template_dir).get_template(name).render(r=context)
