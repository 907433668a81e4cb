"""The options of the original API's tuner (`mneme.tuning.session.TuneOptions`) and where they come from.

`TuneOptions` holds the original's `mneme tune` options with its defaults and refuses invalid
combinations; `merge_config_and_args` lays the command line over a `--config` file;
`RESUME_FIXED` names the options a resumed run must share with the run it continues.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from mneme.compat.builtin_spaces import normalize_launch_candidates

METRICS = ("mean", "median", "min", "max")
SAMPLERS = ("random", "tpe", "grid", "exhaustive")
# Options a resumed run must share with the run it continues.
RESUME_FIXED = (
    "ir_hash",
    "record_database",
    "record_id",
    "space_preset",
    "space_module",
    "metric",
    "launch_dim",
    "launch_safety",
    "passes",
    "fixed_passes",
    "pipeline_file",
    "codegen_opt_range",
    "fixed_codegen_opt",
    "specialize_space",
    "specialize_dims_space",
    "launch_bounds_space",
    "launch_candidates",
    "require_verified_baseline",
)
# What a results folder written before an option existed means by its absence.
RESUME_DEFAULTS = {"launch_candidates": [], "require_verified_baseline": True}


@dataclasses.dataclass
class TuneOptions:
    """The original's `mneme tune` options, with its defaults; invalid combinations raise `ValueError`."""

    record_database: str
    record_id: str | None = None
    space_preset: str = "standard"
    sampler: str = "random"
    trials: int | None = None
    timeout: float | None = None
    iterations: int = 5
    warmup: int = 2
    workers: int = 1
    results_dir: str | None = None
    metric: str = "mean"
    objective: str = "time"
    seed: int | None = None
    resume: bool = False
    rerun_baseline: bool = False
    fail_fast: bool = False
    print_space: bool = False
    dry_run: bool = False
    baseline_only: bool = False
    proteus_output: str | None = None
    proteus_enabled: bool = True
    quiet: bool = False
    study_name: str | None = None
    optuna_storage: str | None = None
    pruner: str = "none"
    launch_dim: str = "auto"
    launch_safety: str | None = None
    adaptive_invalid_ban: bool = True
    # layouts tried first, before the sampler's ([{"block": [x, y, z], "grid": [x, y, z]}, ...])
    launch_candidates: list[dict] = dataclasses.field(default_factory=list)
    # off: a baseline that does not verify is recorded and the search goes on (objective "time" only)
    require_verified_baseline: bool = True
    passes: list[str] | None = None
    fixed_passes: str | None = None
    pipeline_file: str | None = None
    codegen_opt_range: str | None = None
    fixed_codegen_opt: int | None = None
    codegen_method: str | None = None
    specialize_space: str | None = None
    specialize_dims_space: str | None = None
    launch_bounds_space: str | None = None
    min_blocks_per_sm_range: str | None = None
    fixed_min_blocks_per_sm: int | None = None
    max_threads_range: str | None = None
    max_threads_policy: str = "block-threads"
    space_module: str | None = None
    space_arg: list[str] = dataclasses.field(default_factory=list)
    config: str | None = None
    dump_config: str | None = None

    def __post_init__(self) -> None:
        self.launch_candidates = normalize_launch_candidates(self.launch_candidates or [])
        if self.launch_candidates and self.space_module:
            raise ValueError("launch_candidates are not supported with a custom search space")
        if self.launch_candidates and self.sampler not in ("random", "tpe"):
            raise ValueError("launch_candidates require the random or tpe sampler")
        if not self.require_verified_baseline and self.objective != "time":
            raise ValueError("require_verified_baseline=False requires objective='time'")
        if self.trials is not None and self.trials <= 0:
            raise ValueError("--trials must be a positive integer")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"--sampler must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        if self.sampler in ("grid", "exhaustive") and self.trials is not None:
            raise ValueError(
                "--trials cannot be used with grid or exhaustive sampler since the search space size "
                "is determined by the grid"
            )
        if self.sampler in ("random", "tpe") and self.trials is None:
            raise ValueError("--trials is required for random and tpe samplers")
        if self.metric not in METRICS:
            raise ValueError(f"--metric must be one of {', '.join(METRICS)}, not {self.metric!r}")
        if self.objective not in ("time", "speedup"):
            raise ValueError(f"--objective must be time or speedup, not {self.objective!r}")
        if self.warmup < 0 or self.iterations <= 0 or self.workers <= 0:
            raise ValueError("--warmup must be >= 0, --iterations and --workers > 0")

    def resolved_results_dir(self) -> str:
        """`results_dir`, else `mneme-tune-results/<record id>-<time>`."""
        if self.results_dir:
            return self.results_dir
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(self.record_id))
        return str(Path("mneme-tune-results") / f"{safe}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")

    def to_config_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["results_dir"] = self.resolved_results_dir()
        if self.proteus_enabled and self.proteus_output is None:
            data["proteus_output"] = str(Path(data["results_dir"]) / "proteus_tuned_kernels.json")
        return data


def merge_config_and_args(args: Any) -> dict[str, Any]:
    """The options of `--config FILE` (JSON or YAML; a `search` mapping is flattened) under the command line's."""
    cli = dict(vars(args)) if not isinstance(args, Mapping) else dict(args)
    merged: dict[str, Any] = {}
    if cli.get("config"):
        path = Path(cli["config"])
        text = path.read_text()
        if path.suffix == ".json":
            loaded = json.loads(text)
        else:
            import yaml

            loaded = yaml.safe_load(text) or {}
        if not isinstance(loaded, Mapping):
            raise ValueError(f"{path}: a tune configuration file holds a mapping of options")
        merged.update(loaded)
        search = merged.pop("search", None)
        if isinstance(search, Mapping):
            merged.update(search)
    merged.update({k: v for k, v in cli.items() if k not in ("func", "parser", "command") and v is not None})
    return merged
