"""Plots in kernel terms (issue 27, point 5): read back from the HTML's plotly JSON and the PNG's metadata."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("plotly")
pytest.importorskip("matplotlib")

BLOCKS = [32, 64, 128, 256, 512, 1024]


def _store():
    import optuna

    from mneme.core.tuning.store import ResultStore
    from mneme.plugins.samplers.optuna_store import OptunaStore

    study = optuna.create_study(direction="minimize")
    dists = {
        "block_x": optuna.distributions.IntDistribution(0, 10),
        "passes": optuna.distributions.CategoricalDistribution(["default<O3>", "default<O1>"]),
        "fast_math": optuna.distributions.CategoricalDistribution([False, True]),
    }
    for i, block in enumerate(BLOCKS):
        config = {
            "grid": {"x": 4096 // block, "y": 1, "z": 1},
            "block": {"x": block, "y": 1, "z": 1},
            "passes": "default<O3>" if i % 2 else "default<O1>",
            "fast_math": bool(i % 3),
        }
        params = {"block_x": 5 + i, "passes": config["passes"], "fast_math": config["fast_math"]}
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=dists,
                value=(40 + 3 * i) * 1e-6,
                user_attrs={"status": "ok", "config": config},
            )
        )
    return ResultStore(OptunaStore(study, "memory"))


SUMMARY = {
    "meta": {"kernel_name": "saxpy"},
    "baseline": {"time": 50e-6},
    "best": {"time": 41e-6, "trial": 0},
    "ranking": [],
}


def _plotly(path):
    text = path.read_text()
    found = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*(\{.*?\})\s*,\s*\{"responsive', text, re.S)
    return json.loads(found.group(1)), json.loads(found.group(2)), text


def test_html_plots_show_thread_counts_microseconds_baseline_kernel_and_share_one_script(tmp_path):
    from mneme.core.tuning.report import write_plots

    results = tmp_path / "run"
    for folder in ("plots", "plots-again"):
        write_plots(_store(), results / folder, "html", summary=SUMMARY, script_dir=results)
    assert (results / "plotly.min.js").is_file()
    assert not list(results.glob("plots*/plotly.min.js"))  # referenced, not copied per folder
    data, layout, text = _plotly(results / "plots" / "slice.html")
    assert 'src="../plotly.min.js"' in text
    assert layout["title"]["text"].startswith("saxpy: ")
    block_axis = next(v for k, v in layout.items() if k.startswith("xaxis") and v["title"]["text"] == "block_x")
    assert block_axis["tickvals"] == BLOCKS
    assert sorted(data[0]["x"]) == BLOCKS
    assert layout["yaxis"]["title"]["text"] == "time (µs)"
    categories = [v["categoryarray"] for k, v in layout.items() if k.startswith("xaxis") and "categoryarray" in v]
    assert ["off", "on"] in categories and ["default<O1>", "default<O3>"] in categories
    data, layout, _ = _plotly(results / "plots" / "history.html")
    assert layout["title"]["text"] == "saxpy: Optimization History Plot"
    assert "Best Value" not in [d.get("name") for d in data]  # the report's best is drawn instead
    lines = sorted(round(s["y0"], 6) for s in layout["shapes"])
    assert lines == [41.0, 50.0]  # best (report) and the recorded configuration, in µs
    assert min(min(d["y"]) for d in data if d.get("y")) == pytest.approx(40.0)


def test_png_plots_carry_the_kernel_in_their_title(tmp_path):
    from PIL import Image

    from mneme.core.tuning.report import write_plots

    written = write_plots(_store(), tmp_path, "png", summary=SUMMARY)
    assert tmp_path / "history.png" in written
    assert Image.open(tmp_path / "history.png").info.get("Title") == "saxpy: history"
