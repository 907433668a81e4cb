"""`mneme.tuning.search_space` and `mneme.tuning.sample_strategy` as the original Mneme API documents them."""

from __future__ import annotations

import optuna

from mneme.core.pipeline import parse_pipeline
import pytest

from mneme.mneme_types import ExperimentConfiguration, dim3
from mneme.pipeline import PipelineManager
from mneme.tuning.sample_strategy import (
    ExhaustiveSamplingStrategy,
    OptunaSamplingStrategy,
    RandomSamplingStrategy,
)
from mneme.tuning.search_space import (
    BoolParam,
    CategoricalParam,
    FixedParam,
    IntRangeParam,
    PipelineParam,
    RealRangeParam,
    SearchSpace,
    sample_optuna_param,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


class Threads(SearchSpace):
    """Block size over 32..256 step 32, grid derived to cover 4096 elements; even warps only."""

    def dimensions(self):
        return {
            "threads": IntRangeParam("threads", 32, 256, 32),
            "specialize": BoolParam("specialize"),
            "shared": FixedParam("shared", 0),
        }

    def derived(self, params):
        threads = params["threads"]
        return ExperimentConfiguration(
            grid=dim3((4096 + threads - 1) // threads),
            block=dim3(threads),
            shared_mem=params["shared"],
            specialize=params["specialize"],
        )

    def constraints(self, params):
        threads = params.block.x if isinstance(params, ExperimentConfiguration) else params["threads"]
        return (threads // 32) % 2 == 0


def test_parameters_check_their_domains():
    with pytest.raises(ValueError):
        CategoricalParam("c", [])
    with pytest.raises(ValueError):
        IntRangeParam("i", 5, 1)
    with pytest.raises(ValueError):
        IntRangeParam("i", 1, 5, 0)
    with pytest.raises(ValueError):
        RealRangeParam("r", 1.0, 0.5)
    assert BoolParam("b").choices == [True, False]
    assert IntRangeParam("i", 1, 10, 4).values() == [1, 5, 9]  # high off the step grid is allowed
    assert CategoricalParam("d", [dim3(1), dim3(2)]).choices[1] == dim3(2)


def test_sample_random_returns_parameters_that_satisfy_the_constraints():
    space = Threads()
    for _ in range(20):
        sample = space.sample_random()
        assert set(sample) == {"parameters"}
        assert sample["parameters"]["threads"] in (64, 128, 192, 256)


def test_sample_exhaustive_yields_every_valid_derived_configuration():
    configs = list(ExhaustiveSamplingStrategy(Threads()))
    assert all(isinstance(c, ExperimentConfiguration) for c in configs)
    assert sorted({c.block.x for c in configs}) == [64, 128, 192, 256]
    assert len(configs) == 8  # 4 block sizes x specialize on/off
    assert configs[0].grid.x * configs[0].block.x >= 4096


def test_real_ranges_cannot_be_enumerated():
    class Real(Threads):
        def dimensions(self):
            return {"x": RealRangeParam("x", 0.0, 1.0)}

    with pytest.raises(ValueError, match="real"):
        list(Real().sample_exhaustive())


def test_random_strategy_yields_num_samples():
    assert len(list(RandomSamplingStrategy(Threads(), 7))) == 7


def test_optuna_strategy_yields_config_and_trial_until_the_study_holds_n_trials():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = []
    for config, trial in OptunaSamplingStrategy(Threads(), study, 6):
        assert config.block.x in (64, 128, 192, 256)
        study.tell(trial, float(config.block.x))
        seen.append(config)
    assert len(study.trials) >= 6 and seen
    # Rejected samples are told the failing value; a resumed study counts its old trials.
    rejected = [t for t in study.trials if t.value == float((1 << 64) - 1)]
    assert len(seen) + len(rejected) == len(study.trials)
    assert list(OptunaSamplingStrategy(Threads(), study, len(study.trials))) == []


def test_optuna_samples_dim3_choices_by_index():
    study = optuna.create_study()
    trial = study.ask()
    value = sample_optuna_param(trial, CategoricalParam("block", [dim3(32), dim3(64)]))
    assert value in (dim3(32), dim3(64))


def test_pipeline_param_draws_passes_of_the_pipeline_manager():
    manager = PipelineManager()
    passes = manager.get_passes()
    assert passes and manager.to_string(passes[:2]) == f"{passes[0]},{passes[1]}"
    param = PipelineParam("passes", 4)
    assert param.available_passes == sorted(passes)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    pipeline = sample_optuna_param(study.ask(), param)
    assert all(p.split("<")[0] in passes for p in manager.split_pipeline(pipeline))
    assert any(name.startswith("use_") for name in study.trials[0].params)
    parse_pipeline(pipeline)  # LLVM's parser accepts what the parameter draws
