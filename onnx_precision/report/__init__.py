"""The conversion report: JSON for machines, Markdown for people, a short summary for the terminal.

Everything here renders a :class:`RunReport`, a plain value assembled by ``convert`` from the
plan, the oracle's statistics and the search; nothing here runs a model. Each FP32 node is listed
with every reason it got (``Reason.source``: user, type, initializer, rule, range, headroom,
search), its FP32 range and its emulated layerwise error, so a user can always ask "why is this
node FP32". FP16 shares are given by node count and by estimated FLOPs
(:func:`onnx_precision.flops.estimate_flops`).
Reports read back (:func:`from_json`) into the same value, as plans do.
"""

from __future__ import annotations

from .json_format import dumps, from_json, to_json, write_json
from .markdown import summary_lines, to_markdown, verdict_line, write_markdown
from .run_report import REPORT_FORMAT, RunReport, default_paths, for_conversion, tradeoff_path, tradeoff_svg

__all__ = ["dumps", "from_json", "to_json", "write_json", "summary_lines", "to_markdown", "tradeoff_svg",
           "verdict_line", "write_markdown", "REPORT_FORMAT", "RunReport", "default_paths", "for_conversion",
           "tradeoff_path"]
