"""`mneme.mneme_types` as the original Mneme API documents it."""

from __future__ import annotations

import hashlib
import json

import pytest

from mneme.core.types import ExperimentResult as CoreResult
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3

ORIGINAL_FIELDS = [
    "grid",
    "block",
    "shared_mem",
    "specialize",
    "set_launch_bounds",
    "max_threads",
    "min_blocks_per_sm",
    "specialize_dims",
    "passes",
    "codegen_opt",
    "prune",
    "internalize",
]


def test_dim3_defaults_to_ones_and_round_trips_a_dict():
    d = dim3(4)
    assert (d.x, d.y, d.z) == (4, 1, 1)
    assert dim3.from_dict(d.to_dict()) == d
    d.y = 2  # mutable, as the original's
    assert d.to_dict() == {"x": 4, "y": 2, "z": 1}


def test_configuration_needs_no_arguments_and_has_the_documented_defaults():
    c = ExperimentConfiguration()
    assert list(c.to_dict()) == ORIGINAL_FIELDS
    assert c.grid == dim3() and c.block == dim3()
    assert (c.shared_mem, c.max_threads, c.min_blocks_per_sm, c.passes, c.codegen_opt, c.codegen_method) == (
        0,
        1024,
        1,
        "default<O3>",
        3,
        "serial",
    )
    assert c.specialize is False and c.prune is True and c.internalize is True


def test_ground_resets_unused_launch_bounds_in_place_and_returns_none():
    c = ExperimentConfiguration(grid=dim3(8), block=dim3(64))
    assert c.ground() is None
    assert (c.max_threads, c.min_blocks_per_sm) == (0, 0)
    bounded = ExperimentConfiguration(block=dim3(64), set_launch_bounds=True, max_threads=128, min_blocks_per_sm=2)
    bounded.ground()
    assert (bounded.max_threads, bounded.min_blocks_per_sm) == (128, 2)


def test_hash_is_sha256_of_the_sorted_compact_json_of_every_field():
    c = ExperimentConfiguration(grid=dim3(8, 2), block=dim3(128), specialize=True)
    payload = json.dumps(c.to_dict(), sort_keys=True, separators=(",", ":"))
    assert c.hash() == hashlib.sha256(payload.encode()).hexdigest()
    # A grounded configuration hashes differently from the ungrounded one, as in the original.
    before = c.hash()
    c.ground()
    assert c.hash() != before


def test_a_grounded_dict_from_the_original_loads_and_converts_to_the_core():
    data = ExperimentConfiguration(grid=dim3(8), block=dim3(32)).to_dict()
    data["max_threads"], data["min_blocks_per_sm"] = 0, 0
    c = ExperimentConfiguration.from_dict(data)
    assert c.max_threads == 0
    core = c.to_core()
    assert (core.max_threads, core.min_blocks_per_sm) == (1024, 1)
    assert core.grid.x == 8 and core.block.x == 32
    assert ExperimentConfiguration.from_dict(json.loads(json.dumps(data))) == c


def test_is_valid_is_false_only_for_launch_bounds_below_the_block():
    assert ExperimentConfiguration(block=dim3(256)).is_valid()
    assert not ExperimentConfiguration(block=dim3(256), set_launch_bounds=True, max_threads=128).is_valid()
    assert ExperimentConfiguration(block=dim3(128), set_launch_bounds=True, max_threads=128).is_valid()


def test_result_times_are_integer_nanoseconds_with_the_warmups_first():
    core = CoreResult(
        exec_time=[0.001, 0.002, 0.003], warmup_time=[0.5, 0.25], verified=True, executed=True, gpu_id=1, reg_usage=-1
    )
    r = ExperimentResult.from_core(core)
    assert r.exec_time == [500_000_000, 250_000_000, 1_000_000, 2_000_000, 3_000_000]
    assert all(isinstance(t, int) for t in r.exec_time)
    assert r.verified and r.gpu_id == 1 and r.reg_usage == 0
    assert ExperimentResult.from_dict(r.to_dict()) == r
    assert "mneme" not in r.to_dict() and r.mneme is core


def test_an_unknown_field_is_refused_as_in_a_dataclass():
    with pytest.raises(TypeError):
        ExperimentConfiguration.from_dict(
            {"grid": {"x": 1, "y": 1, "z": 1}, "block": {"x": 1, "y": 1, "z": 1}, "bogus": 1}
        )


def test_codegen_method_is_accepted_but_hashed_as_the_current_release_which_has_none():
    documented = ExperimentConfiguration.from_dict(
        {**ExperimentConfiguration(block=dim3(64)).to_dict(), "codegen_method": "serial"}
    )
    current = ExperimentConfiguration.from_dict(ExperimentConfiguration(block=dim3(64)).to_dict())
    assert documented.codegen_method == "serial" and "codegen_method" not in current.to_dict()
    # The current release's digest: its 12 fields, written out by hand here.
    fields = {
        "grid": {"x": 1, "y": 1, "z": 1},
        "block": {"x": 64, "y": 1, "z": 1},
        "shared_mem": 0,
        "specialize": False,
        "set_launch_bounds": False,
        "max_threads": 1024,
        "min_blocks_per_sm": 1,
        "specialize_dims": False,
        "passes": "default<O3>",
        "codegen_opt": 3,
        "prune": True,
        "internalize": True,
    }
    expected = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert documented.hash() == current.hash() == expected
    # "rtc" builds with the one code generator as "serial" does: the same experiment, the same key.
    assert ExperimentConfiguration(block=dim3(64), codegen_method="rtc").hash() == expected
    # The documented version's digest (all 13 fields) stays available for its results files.
    old = hashlib.sha256(
        json.dumps({**fields, "codegen_method": "serial"}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert documented.documented_hash() == old != expected


def test_parallel_codegen_changes_the_experiment_and_so_its_key():
    parallel = ExperimentConfiguration(block=dim3(64), codegen_method="parallel")
    assert parallel.to_dict()["codegen_method"] == "parallel"
    assert parallel.hash() != ExperimentConfiguration(block=dim3(64)).hash()
    assert parallel.to_core().codegen_method == "parallel"
    assert ExperimentConfiguration(codegen_method="rtc").to_core().codegen_method == "serial"
