"""Parameters, search spaces (built-in presets, YAML/JSON and Python user spaces) and their constraints."""

from __future__ import annotations

import json
import random

import pytest

from mneme.core.errors import FormatError, UsageError
from mneme.core.records import RecordedExecution
from mneme.core.tuning import params as P
from mneme.core.tuning.space import SearchSpace, load_space, parse_options
from mneme.core.types import ExperimentConfiguration, dim3


def recording(tmp_path, grid=(16, 1, 1), block=(256, 1, 1), backend="host"):
    rec = RecordedExecution.create(tmp_path, kernel_name="saxpy", static_hash="s1", backend=backend, arch="x86_64")
    inst = rec.add_instance(
        grid=grid,
        block=block,
        shared_mem=0,
        args=b"\0" * 24,
        prologue=tmp_path / "p.mneme",
        epilogue=tmp_path / "e.mneme",
    )
    return rec, inst


# -- parameters ---------------------------------------------------------------------------------


def test_powers_of_two_and_divisors_cover_exactly_their_ranges():
    assert P.powers_of_two(1, 1024) == [2**i for i in range(11)]
    assert P.powers_of_two(20, 100) == [32, 64]
    assert P.divisors(96) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    assert P.divisors(96, 8, 32) == [8, 12, 16, 24, 32]
    with pytest.raises(ValueError):
        P.powers_of_two(0, 4)


def test_parameters_reject_impossible_domains():
    with pytest.raises(ValueError, match="choices must not be empty"):
        P.CategoricalParam("c", [])
    with pytest.raises(ValueError, match="low 5 > high 1"):
        P.IntRangeParam("i", 5, 1)
    with pytest.raises(ValueError, match="step must be > 0"):
        P.IntRangeParam("i", 0, 4, 0)
    with pytest.raises(ValueError, match="must be None, bool, int, float or str"):
        P.CategoricalParam("c", [object()])


def test_int_range_is_inclusive_and_real_range_is_not_enumerable():
    assert P.IntRangeParam("i", 0, 8, 2).encoded_values() == [0, 2, 4, 6, 8]
    real = P.RealRangeParam("r", 0.5, 1.5)
    assert not real.finite
    with pytest.raises(ValueError, match="cannot be enumerated"):
        real.encoded_values()
    assert 0.5 <= real.sample(random.Random(1)) <= 1.5


def test_ordinal_parameter_is_stored_as_the_index_of_its_value():
    p = P.OrdinalParam("block_x", [32, 64, 128])
    assert p.distribution().low == 0 and p.distribution().high == 2
    assert p.decode(2) == 128 and p.encode(64) == 1


def test_pipeline_parameter_orders_drawn_passes_by_priority_from_the_ir_toolkit_registry():
    p = P.PipelineParam("passes", 3)
    assert "instcombine" in p.passes  # the IR toolkit's registry
    decoded = {
        "passes[0].pass": "gvn" if "gvn" in p.passes else "newgvn",
        "passes[0].priority": 0.1,
        "passes[1].pass": "instcombine",
        "passes[1].priority": 0.9,
        "passes[2].pass": "",
        "passes[2].priority": 0.5,
    }
    assert p.combine(decoded) == f"instcombine,{decoded['passes[0].pass']}"
    assert set(p.primitives()) == {f"passes[{i}].{k}" for i in range(3) for k in ("pass", "priority")}


# -- built-in spaces -------------------------------------------------------------------------------


def test_launch_space_derives_grid_to_cover_the_recorded_threads(tmp_path):
    rec, inst = recording(tmp_path, grid=(10, 1, 1), block=(100, 1, 1))
    space = load_space("quick", rec, inst)
    assert set(space.dims()) == {"block_x", "specialize", "specialize_dims"}
    config = space.derived({"block_x": 64, "specialize": False, "specialize_dims": False})
    assert config.block == dim3(64) and config.grid == dim3(16)  # ceil(1000 / 64)
    assert 100 in space.dims()["block_x"].values  # the recorded block is always a candidate


def test_launch_space_picks_axes_where_the_recorded_block_is_larger_than_one(tmp_path):
    rec, inst = recording(tmp_path, grid=(8, 8, 1), block=(16, 16, 1))
    assert {"block_x", "block_y"} <= set(load_space("launch", rec, inst).dims())
    assert "block_y" not in load_space("launch", rec, inst, {"axes": "x"}).dims()
    with pytest.raises(UsageError, match="axes"):
        load_space("launch", rec, inst, {"axes": "xw"}).dims()


def test_block_budget_and_recorded_thread_count_are_constraints(tmp_path):
    rec, inst = recording(tmp_path, grid=(8, 8, 1), block=(16, 16, 1))
    space = load_space("launch", rec, inst, {"max_threads": 512})
    points = [space.decode(e) for e in space.sample_exhaustive()]
    configs = [space.derived(p) for p in points]
    assert configs and all(c.block.size <= 512 for c in configs)
    assert all(c.grid.x * c.block.x >= 128 and c.grid.y * c.block.y >= 128 for c in configs)
    assert all(c.is_valid() for c in configs)  # launch bounds never below the block


def test_grid_stride_kernels_may_run_fewer_threads_than_recorded(tmp_path):
    rec, inst = recording(tmp_path, grid=(64, 1, 1), block=(256, 1, 1))
    strict = load_space("launch", rec, inst, {"launch_bounds": False})
    stride = load_space("launch", rec, inst, {"launch_bounds": False, "grid_stride": True})
    assert "grid_x" in stride.dims() and "grid_x" not in strict.dims()
    small = {"block_x": 64, "grid_x": 8}
    assert stride.constraints(small) and stride.derived(small).grid == dim3(8)
    assert not strict.constraints({"block_x": 64, "grid_x": 8})


def test_exhaustive_enumeration_yields_distinct_grounded_configurations(tmp_path):
    rec, inst = recording(tmp_path)
    space = load_space("launch", rec, inst, {"axes": "x"})
    hashes = [space.derived(space.decode(e)).hash() for e in space.sample_exhaustive()]
    assert len(hashes) == len(set(hashes))
    # launch-bound values collapse when launch bounds are off: 11 blocks x (1 + sum of valid bounds)
    assert len(hashes) < space.size()


def test_ptxas_knobs_are_tuned_only_where_ptxas_compiles(tmp_path):
    rec, inst = recording(tmp_path, backend="host")
    assert "max_registers" not in load_space("compiler", rec, inst).dims()
    rec_cuda, inst_cuda = recording(tmp_path / "c", backend="cuda")
    dims = load_space("compiler", rec_cuda, inst_cuda).dims()
    assert {"ptxas_opt", "max_registers", "cache_mode", "fast_math"} <= set(dims)
    config = load_space("compiler", rec_cuda, inst_cuda).derived(
        {
            "specialize": True,
            "specialize_dims": False,
            "passes": "default<O2>",
            "codegen_opt": 1,
            "ptxas_opt": 2,
            "max_registers": 64,
            "cache_mode": "cg",
            "fast_math": True,
        }
    )
    assert (config.max_registers, config.cache_mode, config.ptxas_opt, config.passes) == (64, "cg", 2, "default<O2>")


def test_every_preset_builds_and_derives_valid_configurations(tmp_path):
    rec, inst = recording(tmp_path, backend="cuda")
    rng = random.Random(3)
    for name in ("quick", "standard", "launch", "compiler", "full"):
        space = load_space(name, rec, inst)
        encoded = space.sample_random(rng)
        config = space.feasible(space.decode(encoded))
        assert isinstance(config, ExperimentConfiguration) and config.is_valid(), name
    assert not load_space("full", rec, inst, {"pipeline": 3}).finite


def test_unknown_space_or_option_is_a_usage_error_naming_it(tmp_path):
    rec, inst = recording(tmp_path)
    with pytest.raises(UsageError, match="nosuch"):
        load_space("nosuch", rec, inst)
    with pytest.raises(UsageError, match="colour"):
        load_space("quick", rec, inst, {"colour": 1})


def test_space_fingerprint_changes_with_its_options(tmp_path):
    rec, inst = recording(tmp_path)
    a = load_space("launch", rec, inst).fingerprint()
    assert a == load_space("launch", rec, inst).fingerprint()
    assert a != load_space("launch", rec, inst, {"max_threads": 256}).fingerprint()


# -- user spaces ----------------------------------------------------------------------------------


def test_yaml_space_extends_a_builtin_and_adds_parameters_and_constraints(tmp_path):
    rec, inst = recording(tmp_path)
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: mine\nbase: quick\noptions: {max_block: 512}\n"
        "parameters:\n  codegen_opt: {low: 1, high: 3}\n  passes: {choices: ['default<O2>', 'default<O3>']}\n"
        "constraints: ['block_x >= 64']\n"
    )
    space = load_space(str(path), rec, inst)
    assert space.name == "mine"
    assert {"block_x", "specialize", "codegen_opt", "passes"} <= set(space.dims())
    assert max(space.dims()["block_x"].values) == 512
    configs = [space.derived(space.decode(e)) for e in space.sample_exhaustive()]
    assert configs and min(c.block.x for c in configs) == 64
    assert {c.codegen_opt for c in configs} == {1, 2, 3}


def test_json_space_with_an_unknown_field_name_is_refused(tmp_path):
    rec, inst = recording(tmp_path)
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"parameters": {"colour": {"choices": ["red"]}}}))
    with pytest.raises(UsageError, match="colour"):
        load_space(str(path), rec, inst)
    path.write_text(json.dumps({"parameters": {"codegen_opt": {"weird": 1}}}))
    with pytest.raises(FormatError, match="parameters.codegen_opt"):
        load_space(str(path), rec, inst)


def test_python_space_class_is_loaded_from_a_file(tmp_path):
    rec, inst = recording(tmp_path)
    path = tmp_path / "myspace.py"
    path.write_text(
        "from mneme.core.tuning import SearchSpace, OrdinalParam\n"
        "class Tiles(SearchSpace):\n"
        "    name = 'tiles'\n"
        "    def dimensions(self):\n"
        "        return {'threads': OrdinalParam('threads', [64, 128])}\n"
        "    def derived(self, params):\n"
        "        i = self.instance\n"
        "        return self.base().replace(block=(params['threads'],),\n"
        "                                   grid=(i.grid_dim.x * i.block_dim.x // params['threads'],))\n"
        "    def base(self):\n"
        "        from mneme.core.types import ExperimentConfiguration\n"
        "        return ExperimentConfiguration(grid=self.instance.grid_dim, block=self.instance.block_dim)\n"
    )
    space = load_space(f"{path}:Tiles", rec, inst, code=True)
    assert isinstance(space, SearchSpace)
    configs = [space.derived(space.decode(e)) for e in space.sample_exhaustive()]
    assert [(c.block.x, c.grid.x) for c in configs] == [(64, 64), (128, 32)]
    with pytest.raises(UsageError, match="no SearchSpace subclass named 'Nope'"):
        load_space(f"{path}:Nope", rec, inst, code=True)


def test_space_options_parse_as_yaml_scalars():
    assert parse_options(["axes=xy", "grid_stride=true", "max_threads=256"]) == {
        "axes": "xy",
        "grid_stride": True,
        "max_threads": 256,
    }
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_options(["oops"])


def test_exhaustive_enumeration_of_a_continuous_space_is_refused_at_once(tmp_path):
    rec, inst = recording(tmp_path)
    space = load_space("full", rec, inst, {"pipeline": 2})
    with pytest.raises(UsageError, match=r"passes\[0\]\.priority.*use a sampler other than exhaustive"):
        space.sample_exhaustive()
