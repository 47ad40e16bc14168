"""The one Jinja environment of every report: packaged templates, overridable by a user folder.

Every report (run, diff, trend) is `build(connection, params) -> typed context` (a dataclass) in its own
module, then `render(name, context, fmt, template_dir)` here: JSON is the context as data, Markdown and
HTML are the templates `<name>.md.j2` / `<name>.html.j2`. A `--template-dir` folder is searched first,
so a user template of a shipped name overrides it and every other name falls back to the shipped one
(a page's partials and base.html.j2 included). Every HTML page extends base.html.j2, whose
Content-Security-Policy allows no network and only the page's own script (by its hash).

Autoescape is on for HTML, so every string that came from a trace is escaped unless a chart helper
built it from numbers and escaped text; StrictUndefined turns a typo in a template into an error.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import jinja2
from markupsafe import Markup
from tracehouse.reports import charts, serving, svg
from tracehouse.reports.names import distinct_short, short_name, short_site

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_JS = (TEMPLATES / "_page.js").read_text(encoding="utf-8")
# the Content-Security-Policy allows this one inline script, by its hash, and nothing from the network
PAGE_JS_HASH = "sha256-" + base64.b64encode(hashlib.sha256(PAGE_JS.encode()).digest()).decode()


def environment(html: bool, template_dir: str | Path | None = None) -> jinja2.Environment:
    """The environment of HTML (autoescaped) or text templates, with the user's folder searched first."""
    return _environment(html, str(template_dir) if template_dir else None)


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept in the cache folder (warehouse.catalog.cache_dir), checked against their
    source by Jinja: compiling the report templates costs ~0.3-0.5 CPU-s a process. Where the folder
    cannot be written, each process compiles them again."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _compiled_templates(html: bool) -> jinja2.BytecodeCache | None:
    """One folder per setting that changes the compiled code (autoescape): Jinja keys a compiled template
    by its name and file only."""
    from tracehouse.warehouse.catalog import cache_dir

    folder = cache_dir() / "templates" / ("html" if html else "text")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _CompiledTemplates(str(folder))


@functools.lru_cache(maxsize=32)
def _environment(html: bool, template_dir: str | None) -> jinja2.Environment:
    folders = ([template_dir] if template_dir else []) + [str(TEMPLATES)]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        bytecode_cache=_compiled_templates(html),
        autoescape=html,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        md=charts.md_cell,
        ns=charts.fmt_ns,
        value=charts.fmt_value,
        spark=charts.sparkline,
        pct=lambda share: "–" if share is None else f"{100 * share:.1f} %",
        short=short_name,
        short_site=short_site,
        distinct=distinct_short,
        attr_dict=charts.point_dict,
    )
    env.globals.update(
        line_chart=charts.line_chart,
        bar_pair=charts.bar_pair,
        share_bars=svg.share_bars,
        step_timeline=svg.step_timeline,
        layer_strip=svg.layer_strip,
        latency_chart=serving.latency_chart,
        roofline_chart=serving.roofline_chart,
        timeline_legend=svg.timeline_legend,
        wall_bar=svg.wall_bar,
        skew_chart=svg.skew_chart,
        page_js=Markup(PAGE_JS),
        page_js_hash=PAGE_JS_HASH,
    )
    return env


def render_template(name: str, context, html: bool, template_dir: str | Path | None = None) -> str:
    return environment(html, template_dir).get_template(name).render(r=context)


FORMATS = ("md", "html", "json")


def render(
    report: str, context, fmt: str, template_dir: str | Path | None = None, data: dict | None = None
) -> str:
    """A report's context as `fmt`: json (`data`, else the dataclass as a dict), md or html (the template
    `<report>.<fmt>.j2`, from template_dir first)."""
    if fmt == "json":
        return json.dumps(asdict(context) if data is None else data, indent=1, default=str) + "\n"
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return render_template(f"{report}.{fmt}.j2", context, html=(fmt == "html"), template_dir=template_dir)
