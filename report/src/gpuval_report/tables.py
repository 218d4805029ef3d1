"""HTML tables of the page: cells arrive escaped (or as the markup the caller built)."""

from __future__ import annotations

from html import escape


def table(headers: list[str], rows: list[list[str]], bad: list[bool] | None = None) -> str:
    """A table with escaped headers; rows marked bad get the page's red background."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        css = ' class="bad"' if bad and bad[index] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
