"""Pieces of a self-contained HTML page: escaped text, relative links, embedded PNGs, sortable tables.

No external assets: the CSS and the few lines of sorting JS are inline, images are base64 data URLs.
Every piece of text and every attribute value goes through ``html.escape``.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hpc_runner.config.values import format_value

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1250px;
 padding:0 1em;color:#222;background:#fff}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.meta{color:#555;margin:.2em 0}code,pre{background:#f4f4f4;padding:.1em .3em;border-radius:3px}
pre{padding:.6em;overflow-x:auto}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .55em;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
thead th{background:#f0f3f7;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none;white-space:nowrap}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
.scroll{overflow-x:auto}td.overrides{font-family:monospace;font-size:.85em;min-width:16em}
.columns{display:flex;flex-wrap:wrap;gap:1em 2.5em;align-items:flex-start}.columns>div{flex:0 1 auto;min-width:18em}
.columns>div.wide{flex:1 1 30em}.columns h3{margin:.3em 0}
td.id{font-family:monospace;font-size:.85em;color:#555}
.state-COMPLETED{color:#2a7a3a}.state-failed{color:#b22;font-weight:600}.warn{color:#b22}.note{color:#555;font-style:italic}
"""

# Click a header to sort by it (again to reverse); empty cells stay last. ``#sort=COL`` (``#sort=-COL``:
# descending) clicks the header of column COL on load, so a link can open the table already sorted.
SCRIPT = """
(function(){
function key(td){var v=td.getAttribute('data-sort');if(v===null)v=td.textContent.trim();
 if(v==='')return [2,''];var n=Number(v);return isNaN(n)?[1,v.toLowerCase()]:[0,n];}
function sortBy(th){var table=th.closest('table'),col=th.cellIndex,body=table.tBodies[0];
 var desc=th.getAttribute('aria-sort')==='ascending';
 Array.prototype.forEach.call(th.parentNode.cells,function(h){h.removeAttribute('aria-sort');});
 th.setAttribute('aria-sort',desc?'descending':'ascending');
 var rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(r1,r2){var a=key(r1.cells[col]),b=key(r2.cells[col]);
  if(a[0]===2||b[0]===2)return a[0]-b[0];if(a[0]!==b[0])return desc?b[0]-a[0]:a[0]-b[0];
  var c=a[1]<b[1]?-1:(a[1]>b[1]?1:0);return desc?-c:c;});
 rows.forEach(function(r){body.appendChild(r);});}
var heads=document.querySelectorAll('table.sortable thead th');
Array.prototype.forEach.call(heads,function(th){th.addEventListener('click',function(){sortBy(th);});});
var m=/[#&]sort=(-?)([^&]*)/.exec(location.hash);
if(m){var name=decodeURIComponent(m[2]);Array.prototype.forEach.call(heads,function(th){
 if(th.getAttribute('data-col')===name){th.click();if(m[1])th.click();}});}
})();
"""


def esc(value: Any) -> str:
    """Return ``value`` as text safe inside an element or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def href(target: Path, base: Path) -> str:
    """Return a relative, URL-quoted link from the folder ``base`` to ``target`` (a folder gets a slash)."""
    rel = os.path.relpath(Path(target).resolve(), Path(base).resolve())
    text = quote(Path(rel).as_posix())
    return text + "/" if Path(target).is_dir() and not text.endswith("/") else text


def link(target: Path, base: Path, text: Any) -> str:
    """Return an ``<a>`` to ``target`` relative to ``base``."""
    return f'<a href="{esc(href(target, base))}">{esc(text)}</a>'


def image(png: bytes, alt: str, caption: str | None = None) -> str:
    """Return a figure with the PNG embedded as a base64 data URL."""
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


@dataclass
class Cell:
    """One table cell: escaped text, an optional sort key, link (already relative) and CSS class."""

    text: Any = ""
    sort: Any = None
    href: str | None = None
    cls: str | None = None
    raw_html: str | None = None  # already-escaped HTML, used as is (e.g. several links)

    def render(self) -> str:
        """Return the ``<td>``."""
        attrs = ""
        if self.cls:
            attrs += f' class="{esc(self.cls)}"'
        if self.sort is not None:
            attrs += f' data-sort="{esc(self.sort)}"'
        if self.raw_html is not None:
            inner = self.raw_html
        elif self.href is not None:
            inner = f'<a href="{esc(self.href)}">{esc(self.text)}</a>'
        else:
            inner = esc(self.text)
        return f"<td{attrs}>{inner}</td>"


def value_cell(value: Any) -> Cell:
    """Return a cell for a result value: numbers right-aligned and sorted by value, floats shown to 4 digits."""
    if value is None:
        return Cell("")
    if isinstance(value, bool):
        return Cell("true" if value else "false")
    if isinstance(value, int):
        return Cell(value, sort=value, cls="num")
    if isinstance(value, float):
        return Cell(f"{value:.4g}", sort=repr(value), cls="num")
    if isinstance(value, dict | list):
        try:
            return Cell(format_value(value))
        except TypeError:
            return Cell(repr(value))
    return Cell(value)


def table(columns: Sequence[str] | None, rows: Iterable[Sequence[Cell]], table_id: str, sortable: bool = True) -> str:
    """Return a table (no header row when ``columns`` is None); if ``sortable``, a header click sorts by it."""
    head = ""
    if columns is not None:
        cells = "".join(f'<th data-col="{esc(c)}" scope="col">{esc(c)}</th>' for c in columns)
        head = f"<thead><tr>{cells}</tr></thead>"
    body = "\n".join("<tr>" + "".join(c.render() for c in row) + "</tr>" for row in rows)
    cls = ' class="sortable"' if sortable and columns is not None else ""
    return f'<table id="{esc(table_id)}"{cls}>{head}\n<tbody>\n{body}\n</tbody></table>'


def key_values(items: Iterable[tuple[str, Any]], table_id: str) -> str:
    """Return a two-column table of names and values (not sortable)."""
    return table(None, [[Cell(k), value_cell(v)] for k, v in items], table_id, sortable=False)


def section(section_id: str, heading: str, parts: Iterable[str]) -> str:
    """Return ``<section id=...>`` with an ``<h2>`` heading and the parts (a fragment link can open it)."""
    return f'<section id="{esc(section_id)}"><h2>{esc(heading)}</h2>\n' + "\n".join(parts) + "\n</section>"


def document(title: str, parts: Iterable[str]) -> str:
    """Return the whole page: inline CSS, the parts in order, the sorting script."""
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
