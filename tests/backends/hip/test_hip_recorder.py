"""The HIP recorder (backends/hip/recorder) end to end on the CPU, against a TEST DOUBLE of the
HIP runtime: tests/backends/hip/hip_recorder/double/hip_double.c, built here as libamdhip64.so.5.

The double is evidence for the recorder's logic, NOT for AMD hardware: its "device" memory is
host memory at the addresses asked for, copies are memcpy, streams and events complete at once,
and a launch runs the host implementation of the kernel that the test program registered. A
`hipcc`-built program (tests/backends/hip/hip_recorder/programs/scale_add.hip, compiled through `mneme-cc` so
its AMDGPU IR is embedded) runs under `mneme hip record` with the double on LD_LIBRARY_PATH; the
recording must then replay verified on the host backend from that IR, against the epilogue the
double's host implementation produced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT
from skips import needs

from mneme.core.elf import ElfFile
from mneme_hip.bundle import code_objects, kernel_image

HERE = Path(__file__).resolve().parent / "hip_recorder"
ABI = ROOT / "backends" / "hip" / "recorder"
KERNEL = "_Z9scale_addPfPKffi"
MNEME = [sys.executable, "-m", "mneme"]

pytestmark = [
    pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc: apt-get install hipcc"),
    needs("gcc"),
]


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    """The double (as libamdhip64.so.5, the name hipcc's programs ask for) and the program beside it."""
    folder = tmp_path_factory.mktemp("hip_double")
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{ABI}",
            f"-Wl,--version-script={HERE / 'double' / 'hip_double.map'}",
            "-Wl,-soname,libamdhip64.so.5",
            str(HERE / "double" / "hip_double.c"),
            "-o",
            str(folder / "libamdhip64.so.5"),
        ],
        check=True,
    )
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    launcher = [sys.executable, "-m", "mneme.instrument.launcher"]
    source = HERE / "programs" / "scale_add.hip"
    annotate = f"-I{ROOT / 'backends' / 'cuda' / 'recorder' / 'include'}"  # mneme_annotate.h
    built = subprocess.run(
        [*launcher, "hipcc", "--offload-arch=gfx90a", annotate, "-c", str(source), "-o", "scale_add.o"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    linked = subprocess.run(
        ["hipcc", "--offload-arch=gfx90a", "scale_add.o", "-o", "scale_add"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert linked.returncode == 0, linked.stdout + linked.stderr
    # the program's own code object, for its hipModuleLoadData modes
    elf = ElfFile.read(folder / "scale_add")
    (section,) = elf.sections_named(".hip_fatbin")
    (code,) = code_objects(elf.section_data(section)).values()
    (folder / "scale_add.hsaco").write_bytes(code)
    return folder / "scale_add"


def record(
    app: Path,
    rdb: Path,
    *args: str,
    options: tuple[str, ...] = (),
    verb: tuple[str, ...] = ("hip", "record"),
    **env: str,
) -> subprocess.CompletedProcess:
    environ = {**os.environ, "LD_LIBRARY_PATH": str(app.parent), **env}
    return subprocess.run(
        [*MNEME, *verb, "-rdb", str(rdb), *options, "--", str(app), *args], env=environ, capture_output=True, text=True
    )


def replay_all(db: Path) -> list[tuple[bool, bool, str]]:
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    rec = RecordedExecution.from_json(db)
    results = []
    for rid in rec.kernel_instances:
        with BaseExecutor(db, record_id=rid, iterations=1, backend="host") as ex:
            r = ex.execute(ex.default_config())
        results.append((r.ok, r.verified, r.error))
    return results


def test_the_program_runs_on_the_double_alone(app):
    run = subprocess.run(
        [str(app)], env={**os.environ, "LD_LIBRARY_PATH": str(app.parent)}, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "y[999] = 4996 (expected 4996)" in run.stdout


def test_a_recording_under_the_double_replays_verified_on_the_host_from_the_embedded_ir(app, tmp_path):
    done = record(app, tmp_path / "db")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mneme-recorder" not in done.stderr  # no warning of its own
    (db,) = (tmp_path / "db").glob("*.json")
    data = json.loads(db.read_text())
    raw = tmp_path / "db" / "raw"
    manifests = [json.loads(p.read_text()) for p in sorted(raw.glob("launch-*/manifest.json"))]
    # two launches with different scalars: two instances, each placed in Mneme's fixed range
    assert len(manifests) == 2
    for m in manifests:
        assert m["format"] == "mneme-hip-raw" and m["kernel"] == KERNEL
        assert m["params"] == [[0, 8], [8, 8], [16, 4], [20, 4]]  # from the code object's metadata
        assert [size for _, size in m["regions"]] == [4000, 4000]
        assert all(0x153940000000 <= addr < 0x153940000000 + (1 << 40) for addr, _ in m["regions"])
        assert m["grid"] == [4, 1, 1] and m["block"] == [256, 1, 1]
    # the argument buffer holds the two placed pointers, the scalar a and n = 1000
    args = bytes.fromhex(manifests[1]["args"])
    assert int.from_bytes(args[0:8], "little") == manifests[1]["regions"][1][0]  # y
    assert int.from_bytes(args[8:16], "little") == manifests[1]["regions"][0][0]  # x
    assert args[16:20] == bytes.fromhex("00004040") and int.from_bytes(args[20:24], "little") == 1000  # 3.0f, n
    results = replay_all(db)
    assert results == [(True, True, "")] * 2


def test_mneme_record_finds_the_hip_recorder_from_the_programs_libamdhip64(app, tmp_path):
    # the core's `mneme record`, no --backend: the program links libamdhip64.so.5, so HIP records it
    done = record(app, tmp_path / "db", verb=("-v", "record"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recording with the hip recorder" in done.stderr
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "db" / "raw").glob("launch-*/manifest.json"))]
    assert [m["format"] for m in manifests] == ["mneme-hip-raw"] * 2
    (db,) = (tmp_path / "db").glob("*.json")
    assert replay_all(db) == [(True, True, "")] * 2


def test_a_replay_fails_verification_when_the_double_computed_something_else(app, tmp_path):
    # the double's host implementation, off by one: the epilogue is not what the kernel's IR computes
    done = record(app, tmp_path / "db", SCALE_ADD_HOST_OFF_BY_ONE="1")
    assert done.returncode == 1  # the program's own check fails too
    (db,) = (tmp_path / "db").glob("*.json")
    results = replay_all(db)
    assert [(ok, verified) for ok, verified, _ in results] == [(False, False)] * 2
    # y (arg 0, the second placed allocation) differs; x does not
    assert all(
        "did not reproduce the recorded epilogue: region 0x153940200000 [arg 0" in error for _, _, error in results
    )


@pytest.mark.parametrize("how", ["ext", "coop", "module", "module-extra", "pitch"])
def test_each_launch_and_allocation_entry_point_records_a_replay_that_verifies(app, tmp_path, how):
    # hipExtLaunchKernel, hipLaunchCooperativeKernel, hipModuleLoadData + hipModuleLaunchKernel
    # (kernelParams, and a packed `extra` buffer), y from hipMallocPitch
    done = record(app, tmp_path / "db", "1000", "2", how, str(app.parent / "scale_add.hsaco"))
    assert done.returncode == 0, done.stdout + done.stderr
    (db,) = (tmp_path / "db").glob("*.json")
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "db" / "raw").glob("launch-*/manifest.json"))]
    assert [m["args"][-16:] for m in manifests] == ["00000040e8030000", "00004040e8030000"]  # a = 2, 3; n = 1000
    assert {m["image_kind"] for m in manifests} == {"hsaco" if how.startswith("module") else "hipfb"}
    assert [m["cooperative"] for m in manifests] == [how == "coop"] * 2  # a replay must launch it the same way
    from mneme.core.records import RecordedExecution

    assert [i.cooperative for i in RecordedExecution.from_json(db).kernel_instances.values()] == [how == "coop"] * 2
    assert replay_all(db) == [(True, True, "")] * 2


def test_device_globals_are_captured_and_restored_by_name(app, tmp_path):
    # scale_add_bias reads `bias` and counts its launches in `calls`: the second launch's
    # prologue holds calls == 1, so it verifies only if the replay restores the global by name
    done = record(app, tmp_path / "db", "1000", "2", "global")
    assert done.returncode == 0, done.stdout + done.stderr
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "db" / "raw").glob("launch-*/manifest.json"))]
    assert [[(name, size) for name, _, size in m["globals"]] for m in manifests] == [[("bias", 4), ("calls", 4)]] * 2
    (db,) = (tmp_path / "db").glob("*.json")
    assert replay_all(db) == [(True, True, "")] * 2


def test_mneme_annotate_gives_a_placed_allocation_its_policy(app, tmp_path):
    done = record(app, tmp_path / "db", "1000", "2", "annotate")
    assert done.returncode == 0, done.stdout + done.stderr  # 3: mneme_annotate did not reach the recorder
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "db" / "raw").glob("launch-*/manifest.json"))]
    y = manifests[0]["regions"][1][0]
    for m in manifests:
        (policy,) = m["policies"]
        assert (policy["addr"], policy["dtype"], policy["threshold"], policy["relative"], policy["tag"]) == (
            y,
            "f32",
            1e-6,
            True,
            "y",
        )
    (db,) = (tmp_path / "db").glob("*.json")
    assert replay_all(db) == [(True, True, "")] * 2


def test_a_compressed_offload_bundle_is_read_natively_and_by_finalize(app, tmp_path):
    # clang-19 --offload-compress writes a CCOB (zstd) bundle: the recorder decompresses it for the
    # arguments' layout, finalize for the code object
    from irbuild import rocm_bitcode_dir

    if shutil.which("clang++-19") is None or rocm_bitcode_dir() is None:
        pytest.skip("needs clang-19 and the ROCm device libraries (rocm-device-libs)")
    launcher = [sys.executable, "-m", "mneme.instrument.launcher"]
    flags = [
        "-x",
        "hip",
        "--offload-arch=gfx90a",
        "--offload-compress",
        "--rocm-path=/usr",
        f"--rocm-device-lib-path={rocm_bitcode_dir()}",
        "-O2",
    ]
    flags.append(f"-I{ROOT / 'backends' / 'cuda' / 'recorder' / 'include'}")
    built = subprocess.run(
        [*launcher, "clang++-19", *flags, "-c", str(HERE / "programs" / "scale_add.hip"), "-o", "z.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    subprocess.run(
        ["clang++-19", "--hip-link", "--rocm-path=/usr", "z.o", "-o", "scale_add_z"], cwd=tmp_path, check=True
    )
    program = tmp_path / "scale_add_z"
    shutil.copy(app.parent / "libamdhip64.so.5", tmp_path)
    done = record(program, tmp_path / "db")
    assert done.returncode == 0, done.stdout + done.stderr
    (image,) = (tmp_path / "db" / "raw" / "images").glob("*.hipfb")
    assert image.read_bytes()[:4] == b"CCOB"
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "db" / "raw").glob("launch-*/manifest.json"))]
    assert [m["params"] for m in manifests] == [[[0, 8], [8, 8], [16, 4], [20, 4]]] * 2
    (db,) = (tmp_path / "db").glob("*.json")
    assert len(list((tmp_path / "db" / "code").glob("*.hsaco"))) == 1  # the code object, decompressed
    assert replay_all(db) == [(True, True, "")] * 2


def test_the_saved_image_is_the_programs_offload_bundle_with_the_kernel(app, tmp_path):
    done = record(app, tmp_path / "db")
    assert done.returncode == 0, done.stderr
    (image,) = (tmp_path / "db" / "raw" / "images").glob("*.hipfb")
    objects = code_objects(image.read_bytes())
    assert [t.rpartition("--")[2] for t in objects] == ["gfx90a"]
    code, kind = kernel_image(image.read_bytes(), KERNEL, "gfx90a", str(image))
    assert kind == "hsaco" and code.startswith(b"\x7fELF")
    assert kernel_image(image.read_bytes(), KERNEL, "gfx942", str(image)) is None


def test_kernel_selection_and_the_instance_bound_apply(app, tmp_path):
    unselected = record(app, tmp_path / "none", options=("--kernel", "^nothing$"))
    assert unselected.returncode == 0 and "4996 (expected 4996)" in unselected.stdout
    assert not list((tmp_path / "none" / "raw").glob("launch-*"))
    bounded = record(app, tmp_path / "one", "1000", "3", options=("--max-recordings", "1"))
    assert bounded.returncode == 0, bounded.stderr
    assert len(list((tmp_path / "one" / "raw").glob("launch-*"))) == 1
    (counts,) = (tmp_path / "one" / "raw").glob("counts-*.json")
    kernel = json.loads(counts.read_text())["kernels"][KERNEL]
    assert kernel["seen"] == 3 and sorted(kernel["instances"].values()) == [1, 1, 1]  # three argument sets


def test_hip_info_says_whether_the_recorder_is_built(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from mneme.core.cli import cli
    from mneme_hip import recorder

    monkeypatch.setenv("MNEME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MNEME_HIP_RECORDER", raising=False)
    shown = CliRunner().invoke(cli, ["hip", "info", "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert report["recorder"].startswith("not built yet") and set(report) == {"usable", "reason", "recorder"}
    built = recorder.build()
    assert built.parent == tmp_path / "cache" / "hip-recorder" and built.name.startswith("libmneme_hip_recorder-")
    assert json.loads(CliRunner().invoke(cli, ["hip", "info", "--json"]).output)["recorder"] == f"built: {built}"
    monkeypatch.setenv("MNEME_HIP_RECORDER", str(tmp_path / "missing.so"))
    assert recorder.library_path() is None  # an explicit path is taken as given, a missing one is not replaced
