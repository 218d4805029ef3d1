"""gpuval's HTML report: `render_page(view)` for a fleet (kubectl gpuval report) or a machine
(gpuval-agent run --html)."""

from gpuval_report.page import render_page, write_page

__all__ = ["render_page", "write_page"]
