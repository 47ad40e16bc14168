"""The one Jinja environment of every report: packaged templates, overridable by a user folder.

Autoescape is on for HTML, so every string that came from a trace is escaped unless a chart helper
built it from numbers and escaped text; StrictUndefined turns a typo in a template into an error.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from reports import charts, serving, svg

TEMPLATES = Path(__file__).resolve().parent / "templates"


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
                       pct=lambda share: "–" if share is None else f"{100 * share:.1f} %")
    env.globals.update(line_chart=charts.line_chart, bar_pair=charts.bar_pair, share_bars=svg.share_bars,
                       step_timeline=svg.step_timeline, layer_strip=svg.layer_strip,
                       latency_chart=serving.latency_chart, roofline_chart=serving.roofline_chart)
    return env


def render_template(name: str, context, html: bool, template_dir: str | Path | None = None) -> str:
    return environment(html, template_dir).get_template(name).render(r=context)
