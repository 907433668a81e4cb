"""Counterpart of the original's hip_vec_add/tune_threads.py: module-level code, no `__main__` guard, 4 workers.

Arguments: RECORD_DB RECORD_ID [TRIALS] (the original fixes 100 trials).
"""

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


class Space(SearchSpace):
    def __init__(self, kernel: RecordedExecution.KernelInstance):
        self.grid_dim_x, self.grid_dim_y, self.grid_dim_z = kernel.grid_dim.x, kernel.grid_dim.y, kernel.grid_dim.z
        self.block_dim_y, self.block_dim_z = kernel.block_dim.y, kernel.block_dim.z
        self.block_dim_x = kernel.block_dim.x
        self.shared_mem = kernel.shared_mem
        self._search_space = {
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
        return self._search_space

    def derived(self, params):
        config = {
            "block": {"x": params["block_dim_x"], "y": self.block_dim_y, "z": self.block_dim_z},
            "grid": {"x": self.grid_dim_x, "y": self.grid_dim_y, "z": self.grid_dim_z},
            "shared_mem": self.shared_mem,
            "specialize": params["specialize"],
            "specialize_dims": params["specialize_dims"],
            "min_blocks_per_sm": params["min_blocks_per_sm"],
            "set_launch_bounds": params["set_launch_bounds"],
            "max_threads": params["max_threads_fraction"],
            "codegen_opt": params["codegen_opt"],
            "codegen_method": params["codegen_method"],
            "passes": params["passes"],
        }
        if params["set_launch_bounds"]:
            x = params["block_dim_x"]
            config["max_threads"] = x + round((1024 - x) * params["max_threads_fraction"] / 64) * 64
        return ExperimentConfiguration.from_dict(config)

    def constraints(self, params):
        return True

    def baseline(self):
        return ExperimentConfiguration.from_dict(
            {
                "block": {"x": self.block_dim_x, "y": self.block_dim_y, "z": self.block_dim_z},
                "grid": {"x": self.grid_dim_x, "y": self.grid_dim_y, "z": self.grid_dim_z},
                "shared_mem": self.shared_mem,
            }
        )


executor = AsyncReplayExecutor(
    record_db=sys.argv[1], record_id=sys.argv[2], iterations=5, results_db_dir="./results", num_workers=4
)
kernel = RecordedExecution.from_json(sys.argv[1])[sys.argv[2]]
space = Space(kernel)
baseline_result = executor.evaluate(space.baseline())
if not baseline_result.verified:
    print("Cannot verify baseline execution exiting")
    sys.exit(0)
baseline_time = statistics.mean(baseline_result.exec_time)
study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler())
outcomes = []
for i, (config, ctrial) in enumerate(
    OptunaSamplingStrategy(space, study, int(sys.argv[3]) if len(sys.argv) > 3 else 100)
):
    if not config.is_valid():
        study.tell(ctrial, (1 << 64) - 1)
        continue
    val = executor.evaluate(config)
    outcomes.append({"verified": val.verified, "failed": val.failed, "error": val.error, "gpu_id": val.gpu_id})
    if val.verified:
        ctrial.set_user_attr("mneme.config", config.to_dict())
        ctrial.set_user_attr("mneme.result", val.to_dict())
        study.tell(ctrial, baseline_time / statistics.mean(val.exec_time))
    else:
        study.tell(ctrial, (1 << 64) - 1)
best = study.best_trial
print(
    json.dumps(
        {"baseline_verified": baseline_result.verified, "trials": outcomes, "best": best.user_attrs.get("mneme.config")}
    )
)
executor.shutdown()
