"""What every plot of a tuning run shares: times in a fitting unit, one plotly script per results folder.

The study plots themselves are drawn by plugins (hook ``mneme_study_plots``; the built-in one
uses its optimizer library's visualizations), the speedups by `report.write_speedup_plot`
(docs/design/tuning.md "Reports").
"""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = "plotly.min.js"


def time_unit(seconds: list[float]) -> tuple[str, float]:
    """The unit that fits these times (their median): ("µs", 1e6), ("ms", 1e3) or ("s", 1.0)."""
    ordered = sorted(s for s in seconds if s is not None)
    if not ordered:
        return "s", 1.0
    median = ordered[len(ordered) // 2]
    if median < 1e-3:
        return "µs", 1e6
    if median < 1.0:
        return "ms", 1e3
    return "s", 1.0


def shared_script(html_dir: Path, script_dir: Path) -> str:
    """The relative path from `html_dir` to the one ``plotly.min.js`` in `script_dir` (written once)."""
    from plotly.offline import get_plotlyjs

    script_dir.mkdir(parents=True, exist_ok=True)
    path = script_dir / SCRIPT
    text = get_plotlyjs()
    if not path.is_file() or path.stat().st_size != len(text.encode()):
        tmp = path.with_name(f".{SCRIPT}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return Path(os.path.relpath(path, html_dir)).as_posix()
