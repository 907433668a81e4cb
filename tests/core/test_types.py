"""Specification of the configuration and result types."""

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mneme.core.errors import FormatError
from mneme.core.types import ExperimentConfiguration, ExperimentResult, dim3


def test_dim3_rejects_zero_and_non_int():
    with pytest.raises(ValueError):
        dim3(0, 1, 1)
    with pytest.raises(TypeError):
        dim3(1.5)
    assert dim3.of([4, 2]) == dim3(4, 2, 1)
    assert dim3.from_dict({"x": 3}) == dim3(3, 1, 1)


def test_configuration_validators_reject_impossible_values():
    with pytest.raises(ValueError):
        ExperimentConfiguration(grid=1, block=1, shared_mem=-1)
    with pytest.raises(ValueError):
        ExperimentConfiguration(grid=1, block=1, codegen_opt=4)
    with pytest.raises(ValueError):
        ExperimentConfiguration(grid=1, block=1, max_threads=2048)


def test_is_valid_rejects_launch_bounds_below_block():
    config = ExperimentConfiguration(grid=8, block=256, set_launch_bounds=True, max_threads=128)
    assert not config.is_valid()
    assert config.replace(max_threads=256).is_valid()
    assert not ExperimentConfiguration(grid=1, block=(64, 32)).is_valid()


def test_ground_makes_unused_launch_bounds_irrelevant():
    a = ExperimentConfiguration(grid=8, block=128, max_threads=256)
    b = ExperimentConfiguration(grid=8, block=128, max_threads=512, min_blocks_per_sm=4)
    assert a != b
    assert a.hash() == b.hash()
    assert a.hash() != a.replace(set_launch_bounds=True, max_threads=256).hash()


def test_hash_is_stable_across_processes():
    config = ExperimentConfiguration(grid=(8, 2), block=(32, 4), specialize=True, passes="default<O2>")
    code = (
        "from mneme.core.types import ExperimentConfiguration as C;"
        "print(C(grid=(8, 2), block=(32, 4), specialize=True, passes='default<O2>').hash())"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == config.hash()


def test_from_dict_names_the_bad_field():
    with pytest.raises(FormatError, match="codegen_opt"):
        ExperimentConfiguration.from_dict({"grid": [1], "block": [1], "codegen_opt": "fast"}, source="cfg.json")
    with pytest.raises(FormatError, match="cfg.json"):
        ExperimentConfiguration.from_dict({"grid": [1], "block": [1], "bogus": 1}, source="cfg.json")


dims = st.builds(dim3, st.integers(1, 64), st.integers(1, 16), st.integers(1, 4))
configs = st.builds(
    ExperimentConfiguration,
    grid=dims,
    block=dims,
    shared_mem=st.integers(0, 1 << 16),
    specialize=st.booleans(),
    set_launch_bounds=st.booleans(),
    max_threads=st.integers(1, 1024),
    min_blocks_per_sm=st.integers(1, 32),
    specialize_dims=st.booleans(),
    passes=st.sampled_from(["default<O0>", "default<O3>", "default<Os>"]),
    codegen_opt=st.integers(0, 3),
    max_registers=st.integers(0, 255),
)


@given(configs)
def test_configuration_round_trips_through_json(config):
    text = json.dumps(config.to_dict())
    again = ExperimentConfiguration.from_dict(json.loads(text))
    assert again == config
    assert again.hash() == config.hash()


@given(configs)
def test_ground_is_idempotent_and_keeps_validity(config):
    grounded = config.ground()
    assert grounded.ground() == grounded
    assert grounded.hash() == config.hash()
    assert grounded.is_valid() == config.is_valid()


def test_result_round_trip_and_median():
    result = ExperimentResult(exec_time=[3.0, 1.0, 2.0, 10.0], verified=True, executed=True)
    assert result.median_time == 2.5
    assert ExperimentResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
