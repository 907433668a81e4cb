"""`mneme.tuning.result_store` of the original Mneme API: a tuning run's results folder, the original's layout.

`config.json` (the resolved options), `search_space.json`, `baseline.json`, `trials.jsonl`
(one trial per line, keys sorted), `best.json`, `summary.json`, and `logs/tune.log`. A run
resumes from it: `load_config`, `load_baseline`, `load_trials`, `completed_hashes`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class ResultStore:
    """The files of one tuning run under `results_dir` (created, with `logs/tune.log`, on construction)."""

    def __init__(self, results_dir: str):
        self.results_dir = Path(results_dir)
        self.logs_dir = self.results_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        (self.logs_dir / "tune.log").touch(exist_ok=True)
        self.trials_file = self.results_dir / "trials.jsonl"

    def path(self, name: str) -> Path:
        return self.results_dir / name

    def write_json(self, name: str, data: Any) -> None:
        """Write `data` as indented JSON to `name` (replaced whole: a reader never sees half a file)."""
        target = self.path(name)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
        tmp.replace(target)

    def write_config(self, config: dict[str, Any]) -> None:
        self.write_json("config.json", config)

    def write_search_space(self, search_space: dict[str, Any]) -> None:
        self.write_json("search_space.json", search_space)

    def write_baseline(self, baseline: dict[str, Any]) -> None:
        self.write_json("baseline.json", baseline)

    def write_best(self, best: dict[str, Any]) -> None:
        self.write_json("best.json", best)

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_json("summary.json", summary)

    def append_trial(self, trial: dict[str, Any]) -> None:
        """Add one trial as one line of `trials.jsonl`."""
        with open(self.trials_file, "a") as out:
            out.write(json.dumps(trial, default=_jsonable, sort_keys=True) + "\n")

    def _load(self, name: str) -> dict[str, Any] | None:
        path = self.path(name)
        return json.loads(path.read_text()) if path.exists() else None

    def load_config(self) -> dict[str, Any] | None:
        return self._load("config.json")

    def load_baseline(self) -> dict[str, Any] | None:
        return self._load("baseline.json")

    def load_trials(self) -> Iterable[dict[str, Any]]:
        if not self.trials_file.exists():
            return []
        return [json.loads(line) for line in self.trials_file.read_text().splitlines() if line.strip()]

    def completed_hashes(self) -> set[str]:
        """The `config_hash` of every stored trial (a resumed run skips them).

        A trial the documented version wrote is keyed by its digest, which counts `codegen_method`;
        the current release's digest of the same configuration is added, so either resumes.
        """
        from mneme.compat.types import ExperimentConfiguration

        hashes = set()
        for trial in self.load_trials():
            if trial.get("config_hash"):
                hashes.add(trial["config_hash"])
            if isinstance(trial.get("config"), dict):
                try:
                    hashes.add(ExperimentConfiguration.from_dict(trial["config"]).hash())
                except (TypeError, ValueError, KeyError):
                    pass  # a configuration this layer cannot read is only skipped by its stored hash
        return hashes
