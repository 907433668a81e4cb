"""Counterpart of the original's hecbench/bezier-surface/tune.py: generated pipelines, exhaustive, futures, Proteus export.

`--pipelines N` is the first argument of `PipelineManager.generate` (the original: 50).
"""

import argparse
import json
import statistics
import sys

from mneme.async_executor import AsyncReplayExecutor
from mneme.convert import convert_to_json
from mneme.mneme_types import ExperimentConfiguration
from mneme.pipeline import PipelineManager
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import ExhaustiveSamplingStrategy
from mneme.tuning.search_space import BoolParam, CategoricalParam, SearchSpace


class PipelineSpace(SearchSpace):
    def __init__(self, kernel: RecordedExecution.KernelInstance, samples: int):
        self.pipeline_manager = PipelineManager()
        self.grid, self.block, self.shared_mem = kernel.grid_dim, kernel.block_dim, kernel.shared_mem
        pipelines = self.pipeline_manager.generate(samples, 120, 20, True, 0)
        pipelines = [self.pipeline_manager.to_string(p) for p in pipelines]
        pipelines += ["default<O3>", "default<O2>", "default<O1>", "default<Os>", "default<Oz>"]
        self.generated = pipelines
        self._dims = {
            "specialize": BoolParam("specialize"),
            "set_launch_bounds": BoolParam("set_launch_bounds"),
            "specialize_dims": BoolParam("specialize_dims"),
            "passes": CategoricalParam("passes", pipelines),
        }

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
                "passes": params["passes"],
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
    p.add_argument("--output-json", "-o", default="bezier-tuned.json")
    p.add_argument("--pipelines", type=int, default=50)
    args = p.parse_args(argv)
    executor = AsyncReplayExecutor(
        record_db=args.record_db, record_id=args.record_id, iterations=5, results_db_dir="./", num_workers=4
    )
    try:
        recorded = RecordedExecution.from_json(args.record_db)
        kernel = recorded[args.record_id]
        space = PipelineSpace(kernel, args.pipelines)
        baseline = executor.evaluate(space.baseline())
        if not baseline.verified:
            return 1
        futures = [
            (config, executor.submit(config)) for config in ExhaustiveSamplingStrategy(space) if config.is_valid()
        ]
        results, outcomes = [], []
        for config, future in futures:
            val = future.result()
            outcomes.append({"passes": config.passes, "verified": val.verified, "error": val.error})
            if val.verified:
                results.append((config, val))
        best = min(results, key=lambda x: sum(x[1].exec_time) / len(x[1].exec_time))
        convert_to_json(args.output_json, recorded, kernel, best[0])
        print(
            json.dumps(
                {
                    "generated": space.generated,
                    "outcomes": outcomes,
                    "best_speedup": statistics.mean(baseline.exec_time) / statistics.mean(best[1].exec_time),
                    "opt_time": sum(x[1].opt_time for x in results),
                }
            )
        )
        return 0
    finally:
        executor.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
