"""Counterpart of the original's hecbench/wsm5/tune_passes.py: exhaustive over three switches and the five `default<O?>` levels."""

import argparse
import json
import statistics
import sys

from mneme.async_executor import AsyncReplayExecutor
from mneme.mneme_types import ExperimentConfiguration
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import ExhaustiveSamplingStrategy
from mneme.tuning.search_space import BoolParam, CategoricalParam, SearchSpace


class SwitchSpace(SearchSpace):
    def __init__(self, kernel: RecordedExecution.KernelInstance):
        self.grid, self.block, self.shared_mem = kernel.grid_dim, kernel.block_dim, kernel.shared_mem
        self._dims = {name: BoolParam(name) for name in ("specialize", "set_launch_bounds", "specialize_dims")}
        self._dims["passes"] = CategoricalParam("passes", ["3", "2", "1", "s", "z"])

    def dimensions(self):
        return self._dims

    def derived(self, params):
        return ExperimentConfiguration.from_dict(
            {
                "block": {"x": self.block.x, "y": self.block.y, "z": self.block.z},
                "grid": {"x": self.grid.x, "y": self.grid.y, "z": self.grid.z},
                "shared_mem": self.shared_mem,
                "specialize": params["specialize"],
                "set_launch_bounds": params["set_launch_bounds"],
                "specialize_dims": params["specialize_dims"],
                "passes": f"default<O{params['passes']}>",
            }
        )

    def constraints(self, params):
        return True

    def baseline(self):
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
    args = p.parse_args(argv)
    executor = AsyncReplayExecutor(
        record_db=args.record_db, record_id=args.record_id, iterations=5, results_db_dir="./", num_workers=1
    )
    try:
        space = SwitchSpace(RecordedExecution.from_json(args.record_db)[args.record_id])
        baseline = executor.evaluate(space.baseline())
        if not baseline.verified:
            return 1
        baseline_time = statistics.mean(baseline.exec_time)
        results = []
        for config in ExhaustiveSamplingStrategy(space):
            if not config.is_valid():
                continue
            val = executor.evaluate(config)
            results.append(
                {
                    "config": config.to_dict(),
                    "verified": val.verified,
                    "error": val.error,
                    "speedup": baseline_time / statistics.mean(val.exec_time) if val.verified else None,
                    "times": [val.opt_time, val.codegen_time, val.preprocess_ir_time],
                }
            )
        print(json.dumps({"results": results, "total_runs": len(results) * (executor.iterations + 1)}))
        return 0
    finally:
        executor.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
