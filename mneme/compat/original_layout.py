"""The original Mneme's results layout written from a run of Mneme's own tuner (`mneme tune --layout both`).

Beside Mneme's files (session.json, study.db, best.json, summary.json, tuned-kernels.json) the
folder gets the original's `config.json`, `search_space.json`, `baseline.json` and
`trials.jsonl`, in the original's fields and units (configurations with the original's 13
fields and `hash()`, results with `exec_time` in integer ns, warm-ups first; `metric` the
mean of the timed runs in ns). The original's `best.json` and `summary.json` are not written:
those names are Mneme's own in the same folder (`mneme results` reads them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mneme.compat.result_store import ResultStore
from mneme.compat.tuning_session import classify_result, metric_value
from mneme.compat.types import ExperimentConfiguration, ExperimentResult

WARMUP_RUNS = 2  # Mneme's tuner runs two warm-ups before the timed runs


def _config(data: dict[str, Any] | None) -> ExperimentConfiguration | None:
    from mneme.core.types import ExperimentConfiguration as Core

    return ExperimentConfiguration.from_core(Core.from_dict(data)) if data else None


def _result(data: dict[str, Any] | None, error: str = "") -> ExperimentResult:
    from mneme.core.types import ExperimentResult as Core

    if not data:
        return ExperimentResult(error=error or "the experiment did not run", failed=True, executed=False)
    return ExperimentResult.from_core(Core.from_dict(data))


def write(results_dir: str | Path, options: dict[str, Any], iterations: int) -> int:
    """Write the original's files into a results folder of Mneme's tuner; returns the number of trials written."""
    from mneme.core.tuning import report

    store_in, session = report.open_results(Path(results_dir))
    out = ResultStore(str(results_dir))
    out.write_config(
        {
            "record_database": session.get("record_db"),
            "record_id": session.get("dynamic_hash"),
            "sampler": session.get("sampler"),
            "trials": options.get("trials"),
            "iterations": iterations,
            "warmup": WARMUP_RUNS,
            "workers": options.get("workers"),
            "results_dir": str(results_dir),
            "metric": "mean",
            "objective": "time",
            "seed": options.get("seed"),
            "study_name": session.get("study"),
            "optuna_storage": session.get("storage"),
            "space_preset": None,
            "space_module": None,
            "mneme": {"space": options.get("space"), "tuner": "mneme", "session": "session.json"},
        }
    )
    space = session.get("space") or {}
    out.write_search_space({"type": "mneme", "class": space.get("class"), "dimensions": space.get("dimensions", {})})
    records = store_in.records()
    stored = store_in.baseline or {}  # the recorded configuration's experiment, kept apart from the trials
    base_metric = None
    if stored.get("config") and stored.get("result"):
        base_cfg, base_res = _config(stored["config"]), _result(stored["result"])
        base_metric = metric_value(base_res, "mean", iterations)
        out.write_baseline({"config": base_cfg.to_dict(), "result": dict(base_res.to_dict(), metric=base_metric)})
    out.trials_file.unlink(missing_ok=True)  # written whole from the store: a rerun gives the same file
    written = 0
    for record in records:
        config = _config(record.config)
        if config is None:
            continue
        result = _result(record.result, error=record.status)
        status = classify_result(result)
        metric = metric_value(result, "mean", iterations) if status == "verified" else None
        out.append_trial(
            {
                "trial": record.number,
                "status": status,
                "config_hash": config.hash(),
                "params": record.params,
                "config": config.to_dict(),
                "result": dict(result.to_dict(), metric=metric),
                "baseline_metric": base_metric,
                "speedup": base_metric / metric if base_metric and metric else None,
            }
        )
        written += 1
    return written
