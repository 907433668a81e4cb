"""Counterpart of the original's cuda_vec_add/tune_threads.py: Optuna over launch, codegen and a 120-draw pipeline."""

import argparse
import json
import statistics
import sys

import optuna

from mneme.async_executor import AsyncReplayExecutor
from mneme.mneme_types import ExperimentConfiguration
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import OptunaSamplingStrategy
from mneme.tuning.search_space import (
    BoolParam,
    CategoricalParam,
    IntRangeParam,
    PipelineParam,
    RealRangeParam,
    SearchSpace,
)


class LaunchAndCodegenSpace(SearchSpace):
    def __init__(self, kernel: RecordedExecution.KernelInstance):
        self.grid = kernel.grid_dim
        self.block = kernel.block_dim
        self.shared_mem = kernel.shared_mem
        self._dims = {
            "block_dim_x": IntRangeParam("block_dim_x", low=64, high=1024, step=64),
            "specialize": BoolParam("specialize"),
            "specialize_dims": BoolParam("specialize_dims"),
            "max_threads_fraction": RealRangeParam("max_threads_fraction", low=0.0, high=1.0),
            "min_blocks_per_sm": IntRangeParam("min_blocks_per_sm", low=1, high=8),
            "set_launch_bounds": BoolParam("set_launch_bounds"),
            "codegen_opt": IntRangeParam("codegen_opt", low=1, high=3, step=1),
            "codegen_method": CategoricalParam("codegen_method", ["serial"]),
            "passes": PipelineParam("passes", 120),
        }

    def dimensions(self):
        return self._dims

    def derived(self, params) -> ExperimentConfiguration:
        fields = {
            "block": {"x": params["block_dim_x"], "y": self.block.y, "z": self.block.z},
            "grid": {"x": self.grid.x, "y": self.grid.y, "z": self.grid.z},
            "shared_mem": self.shared_mem,
            "specialize": params["specialize"],
            "specialize_dims": params["specialize_dims"],
            "min_blocks_per_sm": params["min_blocks_per_sm"],
            "set_launch_bounds": params["set_launch_bounds"],
            # as the original: the fraction itself when launch bounds are off
            "max_threads": params["max_threads_fraction"],
            "codegen_opt": params["codegen_opt"],
            "codegen_method": params["codegen_method"],
            "passes": params["passes"],
        }
        if not params["set_launch_bounds"]:
            return ExperimentConfiguration.from_dict(fields)
        x = params["block_dim_x"]
        fields["max_threads"] = x + round((1024 - x) * params["max_threads_fraction"] / 64) * 64
        return ExperimentConfiguration.from_dict(fields)

    def constraints(self, params):
        return True

    def baseline(self) -> ExperimentConfiguration:
        return ExperimentConfiguration.from_dict(
            {
                "block": {"x": self.block.x, "y": self.block.y, "z": self.block.z},
                "grid": {"x": self.grid.x, "y": self.grid.y, "z": self.grid.z},
                "shared_mem": self.shared_mem,
            }
        )


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--record-db", required=True)
    p.add_argument("--record-id", required=True)
    p.add_argument("--num-trials", type=int, required=True)
    args = p.parse_args(argv)
    executor = AsyncReplayExecutor(
        record_db=args.record_db, record_id=args.record_id, iterations=5, results_db_dir="./results", num_workers=1
    )
    try:
        recorded = RecordedExecution.from_json(args.record_db)
        space = LaunchAndCodegenSpace(recorded[args.record_id])
        baseline = executor.evaluate(space.baseline())
        if not baseline.verified:
            print("Cannot verify baseline execution exiting")
            return 1
        baseline_time = statistics.mean(baseline.exec_time)
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler())
        outcomes = []
        for i, (config, trial) in enumerate(OptunaSamplingStrategy(space, study, args.num_trials)):
            if not config.is_valid():
                study.tell(trial, (1 << 64) - 1)
                continue
            val = executor.evaluate(config)
            outcomes.append(
                {
                    "config": config.to_dict(),
                    "hash": config.hash(),
                    "verified": val.verified,
                    "failed": val.failed,
                    "error": val.error,
                    "runs": len(val.exec_time),
                }
            )
            if val.verified:
                trial.set_user_attr("mneme.config", config.to_dict())
                trial.set_user_attr("mneme.result", val.to_dict())
                study.tell(trial, baseline_time / statistics.mean(val.exec_time))
            else:
                study.tell(trial, (1 << 64) - 1)
        best = study.best_trial
        print(
            json.dumps(
                {
                    "baseline_runs": len(baseline.exec_time),
                    "trials": outcomes,
                    "best": best.user_attrs.get("mneme.config"),
                }
            )
        )
        return 0
    finally:
        executor.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
