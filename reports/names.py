"""Long names shown short on the report pages, so that a reader can scan them and two never read the same.

A kernel name keeps its start (where a GEMM's tile and layout names lie) and is cut at the end with `…`;
the page keeps the full name (HTML: on hover and click). Where two names of one table would still read the
same once cut, each gets a short id, the first 6 hex digits of the SHA-1 of its full name (stable across
runs and pages), so that no two rows read alike. A Python location `file(line): func` loses the start of
its path, never the function.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

ELLIPSIS = "…"


def _strip(name: str) -> str:
    """No `void `, no argument list, no `(anonymous namespace)::`: what a person reads a kernel by."""
    text = name.strip().removeprefix("void ").replace("(anonymous namespace)::", "")
    if text.endswith(")"):  # cut the parameter list: the matching `(` of the last `)`
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += (text[i] == ")") - (text[i] == "(")
            if depth == 0:  # a C++ argument list follows a name; `Memset (Device)` keeps its words
                text = text[:i] if i > 0 and not text[i - 1].isspace() else text
                break
    return text


def short_name(name: str | None, width: int = 64) -> str:
    """A kernel name a person can scan: stripped (_strip), and when longer than `width`, its start and `…`."""
    if not name:
        return ""
    text = _strip(name)
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def name_id(name: str) -> str:
    """A short id of a full name: 6 hex digits of its SHA-1 (the same name, the same id, on every page)."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()[:6]


def distinct_short(names: Iterable[str | None], width: int = 64) -> dict[str, str]:
    """Each full name's short form (short_name), with ` #<name_id>` added to every name whose short form
    another name of the set shares: the shown forms of different names are different."""
    full = sorted({n for n in names if n})
    shown = {n: short_name(n, width) for n in full}
    counts: dict[str, int] = {}
    for s in shown.values():
        counts[s] = counts.get(s, 0) + 1
    return {n: f"{s} #{name_id(n)}" if counts[s] > 1 else s for n, s in shown.items()}


def short_site(site: str | None, width: int = 48) -> str:
    """A Python location `path/to/file.py(61): func` in `width` characters: the path loses its start
    (`…/file.py(61): func`), the function is kept whole while it fits, else cut at its end."""
    if not site:
        return ""
    text = site.strip()
    if len(text) <= width:
        return text
    where, sep, func = text.rpartition("): ")
    if not sep:  # no `(line): func` shape: keep the end, where the file name is
        return ELLIPSIS + text[-(width - 1) :]
    tail = sep + func
    room = width - len(tail) - 1
    if room >= 8:
        return ELLIPSIS + where[-room:] + tail
    file_part = where.rsplit("/", 1)[-1]  # the file name and line, then the function cut at its end
    head = file_part + sep
    return (head + func)[: width - 1] + ELLIPSIS if len(head) < width - 4 else ELLIPSIS + text[-(width - 1) :]
