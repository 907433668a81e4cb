"""Optuna tuning of launch geometry and pipelines with a user SearchSpace, in the original Mneme API's style.

    python tune_launch_optuna.py --record-db DB.json --record-id ID --trials 20 --results OUT

Writes OUT/results.json: one entry per evaluated configuration.
"""

import argparse
import json
import os

import optuna

from mneme.async_executor import AsyncReplayExecutor
from mneme.mneme_types import ExperimentConfiguration, dim3
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.sample_strategy import OptunaSamplingStrategy
from mneme.tuning.search_space import BoolParam, CategoricalParam, IntRangeParam, SearchSpace


class LaunchSpace(SearchSpace):
    """Threads per block and the pipeline; the grid covers the recorded amount of work."""

    def __init__(self, instance):
        self.instance = instance
        self.work = instance.grid_dim.x * instance.block_dim.x

    def dimensions(self):
        return {
            "log2_threads": IntRangeParam("log2_threads", 5, 10),
            "passes": CategoricalParam("passes", ["default<O1>", "default<O2>", "default<O3>"]),
            "specialize": BoolParam("specialize"),
        }

    def derived(self, params):
        threads = 2 ** params["log2_threads"]
        return ExperimentConfiguration(
            grid=dim3((self.work + threads - 1) // threads),
            block=dim3(threads),
            passes=params["passes"],
            specialize=params["specialize"],
        )

    def constraints(self, config):
        return config.grid.x * config.block.x >= self.work

    def baseline(self):
        return ExperimentConfiguration(grid=self.instance.grid_dim, block=self.instance.block_dim)


parser = argparse.ArgumentParser()
parser.add_argument("--record-db", required=True)
parser.add_argument("--record-id", required=True)
parser.add_argument("--trials", type=int, default=20)
parser.add_argument("--results", required=True)
args = parser.parse_args()

instance = RecordedExecution.from_json(args.record_db)[args.record_id]
space = LaunchSpace(instance)
os.makedirs(args.results, exist_ok=True)
executor = AsyncReplayExecutor(
    record_db=args.record_db, record_id=args.record_id, iterations=5, results_db_dir=args.results, num_workers=1
)
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=7))

results = []
baseline = executor.evaluate(space.baseline())
results.append(
    {"config": space.baseline().to_dict(), "result": baseline.to_dict(), "variant": baseline.mneme.variant_hash}
)
for config, trial in OptunaSamplingStrategy(space, study, args.trials):
    result = executor.evaluate(config)
    # The median of the timed runs, the two warm-ups left out; failures get the worst value.
    times = sorted(result.exec_time[2:])
    study.tell(trial, times[len(times) // 2] if result.verified else float((1 << 64) - 1))
    results.append({"config": config.to_dict(), "result": result.to_dict(), "variant": result.mneme.variant_hash})
executor.shutdown()

with open(os.path.join(args.results, "results.json"), "w") as fd:
    json.dump(results, fd, indent=2)
best = study.best_trial
print(f"best of {len(results)}: {best.params} median {best.value} ns (baseline {sorted(baseline.exec_time[2:])[2]} ns)")
