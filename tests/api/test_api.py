"""The public Python API: mneme.capture, mneme.replay and mneme.tune on the host backend."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import mneme
from mneme.core.errors import UsageError
from mneme.core.types import ExperimentConfiguration
from paths import ROOT

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
N = 8192


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, dtype=np.float32)
    return mneme.capture(
        SAXPY_IR,
        "saxpy",
        16,
        256,
        [np.int32(N), np.float32(2.0), x, y],
        tmp_path_factory.mktemp("saxpy"),
        backend="host",
        names=["n", "a", "x", "y"],
    )


def test_importing_mneme_loads_no_heavy_library_and_the_api_loads_on_first_use():
    code = (
        "import sys, mneme; heavy = [m for m in ('llvmlite', 'numpy', 'optuna') if m in sys.modules]; "
        "assert not heavy, heavy; assert callable(mneme.replay) and callable(mneme.tune); "
        "print(mneme.__version__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == mneme.__version__


def test_capture_is_a_module_and_a_function(saxpy_db, tmp_path):
    from mneme import capture

    assert capture.capture is not None and capture.DEFAULT_VA_ADDR  # the module's names, as before
    db = capture.capture(
        SAXPY_IR,
        "saxpy",
        16,
        256,
        [np.int32(N), np.float32(2.0), np.zeros(N, np.float32), np.ones(N, np.float32)],
        tmp_path,
        backend="host",
    )
    assert db.is_file() and saxpy_db.is_file() and db.suffix == ".json"


def test_replay_runs_the_recorded_launch_verified_and_shows_in_a_notebook(saxpy_db):
    result = mneme.replay(saxpy_db, iterations=2, backend="host")
    assert result.verified and result.median_time > 0
    assert len(result.result.exec_time) == 2
    assert result.config.grid.x == 16 and result.config.block.x == 256
    page = result._repr_html_()
    assert "saxpy" in page and "<table>" in page and "verified" in page and ">yes<" in page
    assert "verified" in repr(result) and "NOT" not in repr(result)


def test_replay_takes_configuration_fields_and_files(saxpy_db, tmp_path):
    result = mneme.replay(saxpy_db, iterations=1, backend="host", block=(128, 1, 1), specialize=True)
    assert result.verified and result.config.block.x == 128 and result.config.specialize
    config_file = tmp_path / "best.json"
    config_file.write_text(json.dumps({"config": result.config.to_dict()}))  # as `mneme tune` writes best.json
    again = mneme.replay(saxpy_db, config=config_file, iterations=1, backend="host")
    assert again.config == result.config and again.verified
    base = ExperimentConfiguration(grid=(32, 1, 1), block=(64, 1, 1))
    assert mneme.replay(saxpy_db, base, iterations=1, backend="host", block_dim_x=32).config.block.x == 32
    with pytest.raises(UsageError, match="no_such_field"):
        mneme.replay(saxpy_db, iterations=1, backend="host", no_such_field=1)


def test_tune_returns_its_trials_as_a_dataframe_and_a_best_that_replays(saxpy_db, tmp_path):
    pandas = pytest.importorskip("pandas", reason="needs pandas (the trials' DataFrame)")
    run = mneme.tune(
        saxpy_db,
        trials=3,
        sampler="random",
        seed=1,
        space="quick",
        results=str(tmp_path / "res"),
        iterations=1,
        retime_top=1,
        retime_repeats=1,
        backend="host",
    )
    assert isinstance(run.trials, pandas.DataFrame)
    assert len(run.trials) >= 3 and {"number", "status", "median_time", "config"} <= set(run.trials.columns)
    assert run.results == tmp_path / "res" and (run.results / "best.json").is_file()
    assert run.best is not None and run.best_time > 0 and run.speedup > 0
    page = run._repr_html_()
    assert "<table>" in page and "speedup" in page and "trials" in repr(run)
    best = mneme.replay(saxpy_db, config=run.results / "best.json", iterations=1, backend="host")
    assert best.verified and best.config == run.best


def test_tune_without_pandas_gives_a_list_of_dicts(saxpy_db, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now raises ImportError
    run = mneme.tune(
        saxpy_db,
        trials=2,
        sampler="random",
        seed=2,
        space="quick",
        results=str(tmp_path),
        iterations=1,
        retime_top=0,
        backend="host",
    )
    assert isinstance(run.trials, list) and len(run.trials) >= 2
    assert all(isinstance(row, dict) and row["status"] for row in run.trials)


def test_tune_refuses_an_unknown_option_by_name(saxpy_db):
    with pytest.raises(UsageError, match="trails"):
        mneme.tune(saxpy_db, trails=3)
