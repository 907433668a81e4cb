"""A device global the recording holds but the variant's module does not define is skipped, never an error.

The CUDA recorder records every device global the application's code image registers; libcu++'s
`cuda::std::__4::piecewise_construct` is one, in the image nvcc built, and absent from the module
clang builds from the kernel's IR. These tests give a host-backend recording such a global (both
snapshots hold it, as the recorder writes them) and replay it.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from irbuild import build_cuda_ir

from mneme import capture
from mneme.core.errors import MissingGlobalError
from mneme.core.executor import BaseExecutor
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter

ABSENT = "_ZN4cuda3std3__419piecewise_constructE"
SOURCE = """// add_bias reads the device global `bias`.
__device__ float bias = 1.5f;

extern "C" __global__ void add_bias(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += bias;
}
"""


def _with_global(path, name: str, value: bytes, base: Snapshot | None = None) -> None:
    """Rewrite the snapshot at `path` with one more device global, as the recorder would have written it."""
    with Snapshot.open(path, base) as old:
        regions = [(r.addr, bytes(old.read_region(r.addr)), r.policy) for r in old.regions]
        args, layout, kind = bytes(old.args), old.arg_layout, old.kind
        static_hash, dynamic_hash, globals_ = old.static_hash, old.dynamic_hash, dict(old.globals)
    with SnapshotWriter(path, kind, static_hash=static_hash, dynamic_hash=dynamic_hash) as writer:
        writer.set_args(args, layout=layout or None)
        for addr, data, policy in regions:
            writer.add_region(addr, data, policy=policy)
        for global_name, data in {**globals_, name: value}.items():
            writer.add_global(global_name, bytes(data))


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("absent")
    source = folder / "bias.cu"
    source.write_text(SOURCE)
    data = np.arange(100, dtype=np.float32)
    db = capture.capture(
        build_cuda_ir(source), "add_bias", 1, 128, [data, 100], folder / "db", backend="host", names=["data", "n"]
    )
    rec = RecordedExecution.from_json(db)
    (instance,) = rec.kernel_instances.values()
    # Both sides, epilogue first (it is read against the prologue it diffs from).
    with Snapshot.open(instance.prologue_path) as prologue:
        _with_global(instance.epilogue_path, ABSENT, b"\x00", base=prologue)
    _with_global(instance.prologue_path, ABSENT, b"\x00")
    return db


def test_a_recorded_global_the_module_lacks_is_skipped_and_the_replay_verifies(recording, caplog):
    with BaseExecutor(recording, iterations=1) as ex:
        assert set(ex.prologue.globals) == {"bias", ABSENT}
        with caplog.at_level(logging.INFO, logger="mneme.core.executor"):
            first = ex.execute(ex.default_config())
            second = ex.execute(ex.default_config().replace(block=(64, 1, 1), grid=(2, 1, 1)))
    assert first.ok and first.verified, first.error
    assert second.ok and second.verified, second.error
    skipped = [r.getMessage() for r in caplog.records if "not in this variant's module" in r.getMessage()]
    assert len(skipped) == 1 and ABSENT in skipped[0]  # listed once per loaded module (-v), not per run


def test_the_global_the_module_defines_is_still_restored_and_verified(recording):
    # The kernel adds `bias`: restored from the prologue (1.5) it gives the recorded output; with the
    # device's global changed in the epilogue's eyes the replay would not verify.
    with BaseExecutor(recording, iterations=1) as ex:
        result = ex.execute(ex.default_config())
        data = np.frombuffer(ex.device.read(next(iter(ex.written)), 400), dtype=np.float32)
    assert result.verified, result.error
    np.testing.assert_array_equal(data, np.arange(100, dtype=np.float32) + np.float32(1.5))


def test_the_host_device_names_a_missing_global_with_its_own_error(recording):
    with BaseExecutor(recording, iterations=1) as ex:
        binary = ex.builder.build(ex.default_config())
        with ex.device.load(binary) as kernel:
            with pytest.raises(MissingGlobalError, match=ABSENT[:20]):
                ex.device.write_global(kernel, ABSENT, b"\x00")
