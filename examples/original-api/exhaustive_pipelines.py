"""Exhaustive search over optimization pipelines with PipelineManager, in the original Mneme API's style.

    python exhaustive_pipelines.py --record-db DB.json --record-id ID --max-pipelines 6 --results OUT

Evaluates the standard pipelines and single-pass pipelines from PipelineManager at the recorded
launch geometry; writes OUT/results.json.
"""

import argparse
import json
import os

from mneme.async_executor import AsyncReplayExecutor
from mneme.mneme_types import ExperimentConfiguration
from mneme.pipeline import PipelineManager
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import ExhaustiveSamplingStrategy
from mneme.tuning.search_space import CategoricalParam, FixedParam, SearchSpace


class PipelineSpace(SearchSpace):
    def __init__(self, instance, pipelines):
        self.instance = instance
        self.pipelines = pipelines

    def dimensions(self):
        return {"passes": CategoricalParam("passes", self.pipelines), "codegen_opt": FixedParam("codegen_opt", 3)}

    def derived(self, params):
        return ExperimentConfiguration(
            grid=self.instance.grid_dim,
            block=self.instance.block_dim,
            passes=params["passes"],
            codegen_opt=params["codegen_opt"],
        )

    def constraints(self, config):
        return config.is_valid()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record-db", required=True)
    parser.add_argument("--record-id", required=True)
    parser.add_argument("--max-pipelines", type=int, default=12)
    parser.add_argument("--results", required=True)
    args = parser.parse_args()

    manager = PipelineManager()
    singles = [manager.to_string([manager.get_concrete_passes()[p]]) for p in manager.get_passes()]
    pipelines = (["default<O0>", "default<O3>", "Os", "Oz"] + singles)[: args.max_pipelines]
    instance = RecordedExecution.from_json(args.record_db)[args.record_id]
    os.makedirs(args.results, exist_ok=True)
    executor = AsyncReplayExecutor(
        record_db=args.record_db, record_id=args.record_id, iterations=3, results_db_dir=args.results, num_workers=1
    )
    futures = [
        (config, executor.submit(config)) for config in ExhaustiveSamplingStrategy(PipelineSpace(instance, pipelines))
    ]
    results = []
    for config, future in futures:
        result = future.result()
        results.append({"config": config.to_dict(), "result": result.to_dict(), "variant": result.mneme.variant_hash})
        print(f"{config.passes:24s} verified={result.verified} runs(ns)={result.exec_time}")
    executor.shutdown()
    with open(os.path.join(args.results, "results.json"), "w") as fd:
        json.dump(results, fd, indent=2)


if __name__ == "__main__":
    main()
