"""Study plots drawn with Optuna's visualizations, in kernel terms (the ``optuna`` plugin's ``mneme_study_plots``).

Optimization history, parameter importances, parallel coordinates and slices of a study's
verified trials, read through the result store (`TrialRecord`s, so any store's study is
drawn). The study stores encoded parameters (`block_x` as an index into 1, 2, 4, ... 1024);
each trial's configuration holds what actually ran, so the axes show that; times in a
fitting unit, the baseline and the report's best drawn, the kernel named, Optuna's quoted
categories unquoted (docs/design/tuning.md "Reports").
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from mneme.core.tuning.plotview import time_unit
from mneme.core.tuning.store import TrialRecord

log = logging.getLogger(__name__)

PLOTS = ("history", "importances", "parallel-coordinates", "slice")


def write_study_plots(
    records: list[TrialRecord],
    out_dir: Path,
    kinds: tuple[str, ...],
    *,
    kernel: str = "",
    marks: dict[str, float] | None = None,
    script: str | None = None,
) -> list[Path]:
    """Each plot of `PLOTS` as PNG (matplotlib, Agg backend) and HTML (plotly), as `kinds` ask; a plot the
    trials cannot make (importances of a single trial, say) or a plotting library's failure is skipped with a
    warning. `marks`: label -> seconds of the lines drawn on the history. Returns the files written."""
    unit, scale = time_unit([r.value for r in records])
    marks = {k: v * scale for k, v in (marks or {}).items() if v is not None}
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line for the plots' view
    view = optuna.create_study(direction="minimize")
    # Without their constraints: every trial plotted is feasible, and a feasibility legend would only crowd the plot.
    view.add_trials(display_trials(records, scale))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plotters = {kind: _plotters(kind, script) for kind in kinds}
    written = []
    for name in PLOTS:
        reason = _unplottable(name, records)
        if reason:
            log.warning("skipped the %s plot: %s", name, reason)
            continue
        kwargs: dict[str, Any] = {"target_name": f"time ({unit})"}
        if name == "importances":
            kwargs["params"] = _varying_params(records)
        for kind, (plots, save) in plotters.items():
            path = out_dir / f"{name}.{kind}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    # e.g. "identical low and high ylims" of a one-trial plot: matplotlib widens them itself
                    warnings.filterwarnings("ignore", category=UserWarning, module=r"(optuna|matplotlib)\.")
                    save(plots[name](view, **kwargs), path, name, kernel, unit, marks)
            except Exception as exc:  # a plotting library's limit must not fail the command
                log.warning("skipped the %s plot (%s): %s: %s", name, kind.upper(), type(exc).__name__, exc)
                log.debug("the %s plot failed", name, exc_info=True)
                continue
            written.append(path)
    return written


def _unplottable(name: str, trials: list[TrialRecord]) -> str | None:
    """Why the plot `name` cannot be made from these trials, or None when it can."""
    if name != "importances":
        return None
    if len(trials) < 2:
        return f"parameter importances need at least 2 verified trials, the study has {len(trials)}"
    if not _varying_params(trials):
        return "parameter importances need a parameter that takes different values, every trial has the same ones"
    if len({t.value for t in trials}) < 2:
        return "parameter importances need different times, every trial took the same"
    return None


def _varying_params(trials: list[TrialRecord]) -> list[str]:
    names = sorted({name for t in trials for name in t.params})
    return [n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1]


def _plotters(kind: str, script: str | None = None) -> tuple[dict[str, Any], Any]:
    """The plot functions of one format, by plot name, and the function that saves a figure to a path."""
    if kind == "html":
        import optuna.visualization as vis

        def save_html(figure: Any, path: Path, name: str, kernel: str, unit: str, marks: dict) -> None:
            decorate_plotly(figure, name, kernel, unit, marks)
            figure.write_html(str(path), include_plotlyjs=script or "directory")

        return _plot_functions(vis), save_html
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as mvis

    def save_png(axes: Any, path: Path, name: str, kernel: str, unit: str, marks: dict) -> None:
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure  # slices: an array of axes
        try:
            decorate_matplotlib(axes, name, kernel, unit, marks)
            figure.savefig(path, format="png", dpi=120, bbox_inches="tight", metadata={"Title": f"{kernel}: {name}"})
        finally:
            plt.close(figure)

    return _plot_functions(mvis), save_png


def _plot_functions(module: Any) -> dict[str, Any]:
    return {
        "history": module.plot_optimization_history,
        "importances": module.plot_param_importances,
        "parallel-coordinates": module.plot_parallel_coordinate,
        "slice": module.plot_slice,
    }


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


def display_trials(trials: list[TrialRecord], scale: float) -> list[optuna.trial.FrozenTrial]:
    """Optuna trials of the records, with the parameter values that ran and times in the plot's unit."""
    values: dict[str, list[Any]] = {}
    for t in trials:
        for name, encoded in t.params.items():
            values.setdefault(name, []).append(ran_value(name, t.config, encoded))
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
            value = ran_value(name, t.config, encoded)
            params[name] = label(value) if isinstance(dists[name], CategoricalDistribution) else value
        out.append(
            optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params}, value=t.value * scale)
        )
    return out


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
            figure.add_hline(
                y=value, line_dash={"baseline": "dash"}.get(kind, "dot"), line_color="grey", annotation_text=text
            )
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
    return {f"{key}: {value:.4g}": (value, kinds.get(key, "best")) for key, value in marks.items() if value is not None}


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
