"""Counterpart of the original's hecbench/miniFE/tune.py: TPE over three real fractions mapped to a launch.

`--trials N` is the trial count of `OptunaSamplingStrategy` (the original: 200).
"""

import argparse
import json
import math
import statistics
import sys

import optuna

from mneme.async_executor import AsyncReplayExecutor
from mneme.mneme_types import ExperimentConfiguration
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import OptunaSamplingStrategy
from mneme.tuning.search_space import BoolParam, RealRangeParam, SearchSpace  # noqa: F401 - the original's imports


class FractionSpace(SearchSpace):
    def __init__(self, kernel: RecordedExecution.KernelInstance):
        self.recorded_kernel = kernel
        self.original_size = kernel.grid_dim.x * kernel.block_dim.x
        tiny = sys.float_info.min * sys.float_info.epsilon
        self._dims = {
            name: RealRangeParam(name, tiny, 1.0) for name in ("warp_fraction", "grid_fraction", "max_threads")
        }

    def dimensions(self):
        return self._dims

    def derived(self, params):
        warps = min(math.ceil(params["warp_fraction"] * 1024 / 64), 1024 / 64)
        threads = int(warps * 64)
        blocks = int(math.ceil(self.original_size / threads))
        grid_x = int(min(math.ceil(blocks * params["grid_fraction"]), blocks))
        spare = 1024 - threads
        return ExperimentConfiguration.from_dict(
            {
                "block": {"x": threads, "y": 1, "z": 1},
                "grid": {"x": grid_x, "y": 1, "z": 1},
                "shared_mem": 0,
                "specialize": True,
                "max_threads": threads + int(min(math.ceil(spare * params["max_threads"]), spare)),
                "set_launch_bounds": True,
                "specialize_dims": True,
            }
        )

    def constraints(self, params):
        return True

    def baseline(self):
        k = self.recorded_kernel
        return ExperimentConfiguration.from_dict(
            {
                "block": {"x": k.block_dim.x, "y": k.block_dim.y, "z": k.block_dim.z},
                "grid": {"x": k.grid_dim.x, "y": k.grid_dim.y, "z": k.grid_dim.z},
                "shared_mem": k.shared_mem,
            }
        )


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--record-db", required=True)
    p.add_argument("--record-id", required=True)
    p.add_argument("--trials", type=int, default=200)
    args = p.parse_args(argv)
    executor = AsyncReplayExecutor(
        record_db=args.record_db, record_id=args.record_id, iterations=5, results_db_dir="./", num_workers=1
    )
    try:
        space = FractionSpace(RecordedExecution.from_json(args.record_db)[args.record_id])
        baseline = executor.evaluate(space.baseline())
        if not baseline.verified:
            return 1
        baseline_time = statistics.mean(baseline.exec_time)
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler())
        outcomes = []
        for config, trial in OptunaSamplingStrategy(space, study, args.trials):
            if not config.is_valid():
                continue
            val = executor.evaluate(config)
            outcomes.append(
                {
                    "block": config.block.x,
                    "grid": config.grid.x,
                    "max_threads": config.max_threads,
                    "verified": val.verified,
                    "error": val.error,
                }
            )
            if val.verified:
                trial.set_user_attr("mneme.config", config.to_dict())
                study.tell(trial, baseline_time / statistics.mean(val.exec_time))
            else:
                study.tell(trial, (1 << 64) - 1)
        print(json.dumps({"outcomes": outcomes, "best": study.best_trial.value}))
        return 0
    finally:
        executor.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
