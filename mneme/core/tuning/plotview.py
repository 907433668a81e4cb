"""Plots in kernel terms: the values a configuration ran with, times in a fitting unit, the
baseline and the report's best drawn, the kernel named, one shared plotly script.

The study stores encoded parameters (`block_x` as an index into 1, 2, 4, ... 1024); each
trial's ``config`` attribute holds what actually ran, so the plots read their axes from it
(docs/design/tuning.md "Reports").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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


def ran_value(name: str, config: dict[str, Any] | None, encoded: Any) -> Any:
    """What parameter `name` was when the trial ran: ``block_x`` is the config's ``block.x``."""
    config = config or {}
    if name in config and not isinstance(config[name], dict):
        return config[name]
    field, _, axis = name.rpartition("_")
    if isinstance(config.get(field), dict) and axis in config[field]:
        return config[field][axis]
    return encoded


def label(value: Any) -> str:
    """A short readable label of a categorical value ("on"/"off" for booleans, "-" for none)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "-"
    return str(value)


def display_trials(trials: list[Any], scale: float) -> list[Any]:
    """Frozen trials with real parameter values and times in the plot's unit."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    values: dict[str, list[Any]] = {}
    for t in trials:
        for name, encoded in t.params.items():
            values.setdefault(name, []).append(ran_value(name, t.user_attrs.get("config"), encoded))
    dists: dict[str, Any] = {}
    for name, seen in values.items():
        numbers = [v for v in seen if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) == len(seen) and numbers:
            low, high = min(numbers), max(numbers)
            log = low > 0 and high / low >= 16  # powers of two (thread counts) spread evenly
            if all(isinstance(v, int) for v in numbers):
                dists[name] = IntDistribution(low, max(high, low), log=log)
            else:
                dists[name] = FloatDistribution(low, max(high, low), log=log)
        else:
            dists[name] = CategoricalDistribution(sorted({label(v) for v in seen}))
    out = []
    for t in trials:
        params = {}
        for name, encoded in t.params.items():
            value = ran_value(name, t.user_attrs.get("config"), encoded)
            params[name] = label(value) if isinstance(dists[name], CategoricalDistribution) else value
        out.append(optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params},
                                             value=t.value * scale))
    return out


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


def decorate_plotly(figure: Any, name: str, kernel: str, unit: str, marks: dict[str, float]) -> Any:
    """Kernel name in the title, the time unit on the axis, the baseline and report's best drawn."""
    title = figure.layout.title.text or name
    figure.update_layout(title=f"{kernel}: {title}" if kernel else title)
    for trace in figure.data:  # Optuna quotes categories ('off'): the label is enough
        if trace.x is not None and any(isinstance(x, str) for x in trace.x):
            trace.x = [_unquote(x) for x in trace.x]
    for key in list(figure.layout):
        axis = getattr(figure.layout, key, None)
        if key.startswith("xaxis") and getattr(axis, "categoryarray", None) is not None:
            axis.categoryarray = [_unquote(x) for x in axis.categoryarray]
    for trace in figure.data:  # a log axis (thread counts) ticks at the values that ran: 32, 64, ... 1024
        ref = "xaxis" + (getattr(trace, "xaxis", None) or "x")[1:]
        axis = getattr(figure.layout, ref, None)
        if axis is not None and axis.type == "log" and trace.x is not None:
            ticks = sorted({x for x in trace.x if isinstance(x, (int, float))})
            axis.update(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    if name == "history":
        figure.data = tuple(d for d in figure.data if d.name != "Best Value")  # the report's best instead
        figure.update_yaxes(title_text=f"time ({unit})")
        for text, (value, kind) in _lines(marks).items():
            figure.add_hline(y=value, line_dash={"baseline": "dash"}.get(kind, "dot"), line_color="grey",
                             annotation_text=text)
    return figure


def decorate_matplotlib(axes: Any, name: str, kernel: str, unit: str, marks: dict[str, float]) -> None:
    """As `decorate_plotly`, and category tick labels turned so they never run together."""
    first = axes.flat[0] if hasattr(axes, "flat") else axes
    figure = first.figure
    title = first.get_title() or name
    if hasattr(axes, "flat") and len(axes.flat) > 1:
        figure.suptitle(f"{kernel}: {name}" if kernel else name)
    else:
        first.set_title(f"{kernel}: {title}" if kernel else title)
    for each in getattr(axes, "flat", [axes]):
        if each.get_xscale() == "log":  # tick at the values that ran (32, 64, ... 1024), not powers of ten
            import numpy as np
            from matplotlib.ticker import NullFormatter

            xs = sorted({float(x) for c in each.collections for x in np.asarray(c.get_offsets())[:, 0]})
            if xs:
                each.set_xticks(xs, [f"{x:g}" for x in xs], rotation=45, ha="right")
                each.xaxis.set_minor_formatter(NullFormatter())
            continue
        ticks = each.get_xticklabels()
        if ticks and not all(_numeric(t.get_text()) for t in ticks):
            # categories side by side must not run into each other; Optuna quotes them ('off')
            each.set_xticks(each.get_xticks(), [_unquote(t.get_text()) for t in ticks], rotation=30, ha="right")
    if name == "history":
        for line in list(first.get_lines()):
            if line.get_label() == "Best Value":
                line.remove()
        first.set_ylabel(f"time ({unit})")
        for text, (value, kind) in _lines(marks).items():
            first.axhline(value, color="grey", linestyle={"baseline": "--"}.get(kind, ":"), linewidth=1, label=text)
        first.legend(loc="best", fontsize="small")


def _lines(marks: dict[str, float]) -> dict[str, tuple[float, str]]:
    """Legend text -> (value, "baseline" | "best") of the lines to draw on the history."""
    kinds = {"recorded configuration": "baseline"}
    return {f"{key}: {value:.4g}": (value, kinds.get(key, "best")) for key, value in marks.items()
            if value is not None}


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    return value


def _numeric(text: str) -> bool:
    try:
        float(text.replace("\N{MINUS SIGN}", "-"))
    except ValueError:
        return False
    return True
