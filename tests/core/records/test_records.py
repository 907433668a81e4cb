"""Specification of the recording database (`mneme.core.records`) on real recordings."""

from __future__ import annotations

import json
import os
import struct

import pytest
from test_records_fixtures import KERNEL, VA_ADDR, make_recording, tree

from mneme.core import ir
from mneme.core.demangle import demangle
from mneme.core.errors import FormatError, UsageError
from mneme.core.records import SCHEMA_VERSION, ArgInfo, ImageInfo, KernelInstance, RecordedExecution
from paths import ROOT


def test_database_round_trips_through_json_with_original_field_names(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000))
    data = json.loads(rec.path.read_text())
    assert rec.path.name == f"{rec.static_hash}.json"
    assert list(data) == [
        "SchemaVersion",
        "KernelName",
        "DemangledName",
        "StaticHash",
        "Backend",
        "Arch",
        "Modules",
        "BinaryBlobs",
        "VAddr",
        "VASize",
        "ArgNames",
        "ArgSizes",
        "ArgOffsets",
        "ArgKinds",
        "Specializations",
        "Globals",
        "instances",
    ]
    assert data["SchemaVersion"] == SCHEMA_VERSION
    assert data["VAddr"] == "0x7f0000000000"
    assert data["Modules"] == ["ir/scale_template.ll"]
    assert data["ArgSizes"] == [8, 4, 4] and data["ArgOffsets"] == [0, 8, 12]
    assert data["ArgKinds"] == ["pointer", "float", "int"]
    assert data["Specializations"] == [False, True, True]
    inst = next(iter(data["instances"].values()))
    assert set(inst) == {"GridDims", "BlockDims", "SharedMem", "Args", "Prologue", "Epilogue", "Occurrences"}
    assert inst["GridDims"] == {"x": 2, "y": 1, "z": 1}
    assert inst["Prologue"].startswith("snapshots/DeviceState.prologue.")

    loaded = RecordedExecution.from_json(rec.path)
    assert loaded == rec
    assert loaded.to_dict() == data
    assert loaded.va_addr == VA_ADDR and loaded.va_size == 1 << 20
    assert loaded.demangled_name == "void scale<float>(float*, float, int)"


def test_views_give_absolute_paths_inside_the_folder_and_the_seed_api_names(tmp_path):
    rec = RecordedExecution.from_json(make_recording(tmp_path).path)
    assert rec.folder == tmp_path
    assert rec.llvm_files == [tmp_path / "ir" / "scale_template.ll"]
    assert rec.arg_names == ["arg0", "arg1", "arg2"]
    assert rec.args[1] == ArgInfo("arg1", 8, 4, "float", True)
    inst = rec.select()
    assert inst.static_hash == rec.static_hash and inst.kernel_name == KERNEL
    assert inst.available_specializations == [1, 2]
    assert inst.prologue_path.is_file() and inst.epilogue_path.is_file()
    assert inst.prologue_path.parent == tmp_path / "snapshots"
    pointer, factor, n = inst.arg_values
    assert struct.unpack("<Q", pointer)[0] == VA_ADDR
    assert struct.unpack("<f", factor)[0] == 2.0 and struct.unpack("<i", n)[0] == 256
    assert inst.grid_dim.as_tuple() == (2, 1, 1) and inst.block_dim.as_tuple() == (128, 1, 1)


def test_database_behaves_as_a_mapping_over_instances(tmp_path):
    rec = make_recording(tmp_path, sizes=(64, 128, 512))
    keys = list(rec)
    assert len(rec) == 3 and keys == list(rec.kernel_instances)
    assert keys[0] in rec and "nope" not in rec
    assert rec[keys[0]] is rec.kernel_instances[keys[0]]
    assert [k for k, _ in rec.items()] == keys and list(rec.keys()) == keys
    assert all(isinstance(v, KernelInstance) for v in rec.values())
    moved = rec[keys[0]]
    del rec[keys[0]]
    assert keys[0] not in rec and len(rec) == 2
    rec["renamed"] = KernelInstance(
        grid_dim=moved.grid_dim,
        block_dim=moved.block_dim,
        shared_mem=0,
        args=moved.args,
        prologue_file=moved.prologue_file,
        epilogue_file=moved.epilogue_file,
    )
    assert rec["renamed"].dynamic_hash == "renamed" and rec["renamed"].kernel_name == KERNEL
    with pytest.raises(TypeError):
        rec["bad"] = {"GridDims": {}}
    rec.save()
    assert set(RecordedExecution.from_json(rec.path)) == {"renamed", *keys[1:]}


def test_select_infers_the_only_instance_and_lists_ids_otherwise(tmp_path):
    one = make_recording(tmp_path / "one")
    assert one.select() is next(iter(one.values()))
    many = make_recording(tmp_path / "many", sizes=(64, 128))
    ids = sorted(many)
    with pytest.raises(UsageError) as err:
        many.select()
    assert all(i in str(err.value) for i in ids) and "2 kernel instances" in str(err.value)
    assert many.select(ids[1]) is many[ids[1]]
    assert many.select(ids[1][:6]) is many[ids[1]]  # a unique prefix is enough
    with pytest.raises(UsageError, match="no kernel instance 'zzz'"):
        many.select("zzz")


def test_adding_a_known_launch_context_counts_an_occurrence(tmp_path):
    rec = make_recording(tmp_path)
    inst = rec.select()
    again = rec.add_instance(
        grid=inst.grid_dim,
        block=inst.block_dim,
        shared_mem=0,
        args=inst.args,
        prologue=inst.prologue_path,
        epilogue=inst.epilogue_path,
    )
    assert again is inst and inst.occ == 2 and len(rec) == 1
    rec.save()
    assert RecordedExecution.from_json(rec.path).select().occ == 2


def test_binary_only_database_names_its_images_and_refuses_to_link(tmp_path):
    (tmp_path / "code").mkdir()
    ptx = tmp_path / "code" / "k.ptx"
    ptx.write_text(".version 8.0\n.target sm_90\n.address_size 64\n")
    rec = RecordedExecution.create(
        tmp_path,
        kernel_name="k",
        static_hash="ptxonly",
        backend="cuda",
        arch="sm_90",
        binary_blobs=[(ptx, "ptx")],
        args=[ArgInfo("n", 0, 4)],
    )
    rec.save()
    loaded = RecordedExecution.from_json(tmp_path / "ptxonly.json")
    assert loaded.binary_blobs == [ImageInfo(ptx, "ptx")]
    assert loaded.to_dict()["BinaryBlobs"] == [{"Path": "code/k.ptx", "Kind": "ptx"}]
    assert not loaded.has_ir and loaded.args[0].kind == "unknown"
    with pytest.raises(FormatError, match="without LLVM IR"):
        loaded.link_llvm_modules()


def test_link_llvm_modules_links_the_kernel_once(tmp_path):
    rec = RecordedExecution.from_json(make_recording(tmp_path).path)
    mod = rec.link_llvm_modules()
    assert ir.kernels(mod) == [KERNEL]
    assert rec.link_llvm_modules() is mod


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    rec = make_recording(tmp_path)
    before = rec.path.read_bytes()
    rec.select().occ = 5
    os.chmod(rec.path, 0o640)
    rec.save()
    assert rec.path.read_bytes() != before
    assert oct(rec.path.stat().st_mode & 0o777) == oct(0o640)  # the existing file's mode is kept
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # An invalid database is refused before the file is touched.
    rec.arg_kinds[0] = "vector"
    snapshot = tree(tmp_path)
    with pytest.raises(FormatError, match="ArgKinds"):
        rec.save()
    assert tree(tmp_path) == snapshot


def test_create_refuses_files_outside_the_folder(tmp_path):
    outside = tmp_path / "elsewhere.ll"
    outside.write_text("")
    with pytest.raises(FormatError, match="outside the database's folder"):
        RecordedExecution.create(
            tmp_path / "db", kernel_name="k", static_hash="h", backend="host", arch="x86_64", modules=[outside]
        )
    with pytest.raises(UsageError, match="static hash"):
        RecordedExecution.create(tmp_path, kernel_name="k", static_hash="../h", backend="host", arch="x86_64")


def test_to_json_elsewhere_rewrites_paths_and_requires_the_files_inside(tmp_path):
    rec = make_recording(tmp_path / "a")
    with pytest.raises(FormatError, match="mneme copy"):
        rec.to_json(tmp_path / "a" / "sub" / "b.json")
    assert not (tmp_path / "a" / "sub" / "b.json").exists()
    assert rec.path == tmp_path / "a" / f"{rec.static_hash}.json"
    rec.to_json(tmp_path / "up.json")  # the parent folder holds every file
    loaded = RecordedExecution.from_json(tmp_path / "up.json")
    assert loaded.modules == ["a/ir/scale_template.ll"]
    assert loaded.select().prologue_file.startswith("a/snapshots/")
    assert loaded.llvm_files == [tmp_path / "a" / "ir" / "scale_template.ll"]


def test_demangle_reads_cxx_names_and_keeps_c_names():
    assert demangle("_Z5scaleIfEvPT_S0_i") == "void scale<float>(float*, float, int)"
    assert demangle("saxpy") == "saxpy"


def test_instance_prologue_and_epilogue_open_the_recorded_snapshots(tmp_path):
    import numpy as np

    rec = RecordedExecution.from_json(make_recording(tmp_path, sizes=(100,)).path)
    inst = rec.select()
    with inst.prologue as prologue, inst.epilogue as epilogue:
        assert prologue.args == inst.args and prologue.num_args == 3
        x = np.frombuffer(prologue.snapshot.read_region(VA_ADDR), dtype=np.float32)
        y = np.frombuffer(epilogue.snapshot.read_region(VA_ADDR), dtype=np.float32)
        assert np.array_equal(y, 2 * x) and x[99] == 99.0
        assert str(epilogue.regions[0].policy) == "f32 rel 1e-06 norm Linf"
        assert prologue != epilogue


def test_the_documented_example_is_a_valid_database(tmp_path):
    import re
    from pathlib import Path

    docs = ROOT / "docs"
    text = (docs / "formats.md").read_text()
    example = json.loads(next(b for b in re.findall(r"```json\n(.*?)```", text, re.DOTALL) if '"KernelName"' in b))
    files = example["Modules"] + [b["Path"] for b in example["BinaryBlobs"]]
    files += [i[k] for i in example["instances"].values() for k in ("Prologue", "Epilogue")]
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / "example.json").write_text(json.dumps(example))
    rec = RecordedExecution.from_json(tmp_path / "example.json")
    assert rec.to_dict() == example
    assert [
        struct.unpack("<f", v)[0] if a.kind == "float" else int.from_bytes(v, "little")
        for a, v in zip(rec.args, rec.select().arg_values)
    ] == [VA_ADDR, 2.0, 256]


def test_create_takes_paths_relative_to_the_current_directory(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    out = Path("out")
    (out / "code").mkdir(parents=True)
    (out / "code" / "k.ptx").write_text(".version 8.0\n")
    rec = RecordedExecution.create(
        out,
        kernel_name="k",
        static_hash="rel",
        backend="cuda",
        arch="sm_90",
        binary_blobs=[(out / "code" / "k.ptx", "ptx")],
    )
    assert rec.images == [ImageInfo("code/k.ptx", "ptx")]
    rec.save()
    assert RecordedExecution.from_json("out/rel.json").binary_blobs[0].path.read_text() == ".version 8.0\n"


def test_shipped_recordings_stay_readable():
    from pathlib import Path

    shipped = sorted((ROOT / "examples" / "recordings").glob("*/*.json"))
    assert shipped, "examples/recordings holds no recording"
    for path in shipped:
        rec = RecordedExecution.from_json(path)
        inst = rec.select()
        with inst.prologue as prologue, inst.epilogue as epilogue:
            assert prologue.args == inst.args
            assert {r.addr for r in epilogue.regions} <= {r.addr for r in prologue.regions}


def test_paths_are_absolute_whatever_the_current_directory(tmp_path, monkeypatch):
    make_recording(tmp_path / "db")
    monkeypatch.chdir(tmp_path)
    name = next(p.name for p in (tmp_path / "db").glob("*.json"))
    rec = RecordedExecution.from_json(f"db/{name}")
    assert rec.path.is_absolute() and all(f.is_absolute() for f in rec.llvm_files + rec.referenced_files())
    monkeypatch.chdir("/")
    assert rec.select().prologue_path.is_file()


def test_in_application_times_round_trip_and_are_omitted_when_unknown(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000))
    timed, untimed = list(rec.kernel_instances)
    rec[timed].app_times = [1.5e-5, 1.25e-5]
    rec.add_instance(
        grid=rec[timed].grid_dim,
        block=rec[timed].block_dim,
        shared_mem=rec[timed].shared_mem,
        args=rec[timed].args,
        prologue=rec[timed].prologue_path,
        epilogue=rec[timed].epilogue_path,
        app_times=[2e-5],
    )
    rec.save()
    data = json.loads(rec.path.read_text())
    assert data["instances"][timed]["AppTimes"] == [1.5e-5, 1.25e-5, 2e-5]
    assert data["instances"][timed]["Occurrences"] == 2
    assert "AppTimes" not in data["instances"][untimed]
    loaded = RecordedExecution.from_json(rec.path)
    assert loaded[timed].app_times == [1.5e-5, 1.25e-5, 2e-5] and loaded[untimed].app_times == []
    assert loaded == rec


def test_a_version_1_database_is_read_as_the_current_version_without_in_application_times(tmp_path):
    rec = make_recording(tmp_path)
    data = json.loads(rec.path.read_text())
    data["SchemaVersion"] = 1  # what every recording before AppTimes existed says
    rec.path.write_text(json.dumps(data))
    loaded = RecordedExecution.from_json(rec.path)
    assert SCHEMA_VERSION == 5 and loaded.schema_version == 5
    assert all(inst.app_times == [] for inst in loaded.kernel_instances.values())
    loaded.save()  # writers write the current version
    assert json.loads(rec.path.read_text())["SchemaVersion"] == 5


def test_a_version_2_database_s_application_times_are_read_as_timed_by_cuda_events(tmp_path):
    rec = make_recording(tmp_path)
    data = json.loads(rec.path.read_text())
    key = next(iter(data["instances"]))
    data["SchemaVersion"] = 2
    data["instances"][key]["AppTimes"] = [3.5e-6, 3.6e-6]
    rec.path.write_text(json.dumps(data))
    loaded = RecordedExecution.from_json(rec.path)
    assert loaded[key].app_times == [3.5e-6, 3.6e-6] and loaded[key].app_timer == "events"
    loaded.save()
    assert "AppTimer" not in json.loads(rec.path.read_text())["instances"][key]


def test_the_timer_of_application_times_round_trips_and_times_of_two_timers_do_not_mix(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000))
    by_kernel, by_events = list(rec.kernel_instances)
    rec[by_kernel].app_times, rec[by_kernel].app_timer = [1.12e-6, 1.13e-6], "cupti"
    rec[by_events].app_times = [3.5e-6]
    rec.save()
    data = json.loads(rec.path.read_text())
    assert data["instances"][by_kernel]["AppTimer"] == "cupti"
    assert "AppTimer" not in data["instances"][by_events]  # the default, as version 2 wrote it
    loaded = RecordedExecution.from_json(rec.path)
    assert (loaded[by_kernel].app_timer, loaded[by_events].app_timer) == ("cupti", "events")
    inst = rec[by_kernel]
    with pytest.raises(UsageError, match="do not mix"):
        rec.add_instance(
            grid=inst.grid_dim,
            block=inst.block_dim,
            shared_mem=inst.shared_mem,
            args=inst.args,
            prologue=inst.prologue_path,
            epilogue=inst.epilogue_path,
            app_times=[3e-6],
        )
    assert rec[by_kernel].app_times == [1.12e-6, 1.13e-6] and rec[by_kernel].occ == 1  # nothing changed
    with pytest.raises(ValueError, match="app_timer"):
        KernelInstance(
            grid_dim=1, block_dim=1, shared_mem=0, args=b"", prologue_file="p", epilogue_file="e", app_timer="stopwatch"
        )
    data["instances"][by_kernel]["AppTimer"] = "stopwatch"
    rec.path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="AppTimer") as err:
        RecordedExecution.from_json(rec.path)
    assert err.value.field == f"instances.{by_kernel}.AppTimer"


def test_a_cooperative_or_clustered_launch_round_trips_and_older_versions_read_as_plain_launches(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000, 512))
    coop, clustered, plain = list(rec.kernel_instances)
    rec[coop].cooperative = True
    rec[clustered].cluster_dim = (2, 1, 1)
    rec.save()
    data = json.loads(rec.path.read_text())
    assert data["instances"][coop]["Cooperative"] is True and "ClusterDims" not in data["instances"][coop]
    assert data["instances"][clustered]["ClusterDims"] == {"x": 2, "y": 1, "z": 1}
    assert not {"Cooperative", "ClusterDims"} & set(data["instances"][plain])  # absent: a plain launch
    loaded = RecordedExecution.from_json(rec.path)
    assert loaded[coop].launch_attributes.names == {"cooperative"}
    assert loaded[clustered].launch_attributes.names == {"cluster"} and loaded[clustered].cluster_dim.x == 2
    assert loaded[plain].launch_attributes.names == set() and loaded == rec
    data["SchemaVersion"] = 3  # what every recorder before these fields wrote: plain launches
    for entry in data["instances"].values():
        entry.pop("Cooperative", None), entry.pop("ClusterDims", None)
    rec.path.write_text(json.dumps(data))
    old = RecordedExecution.from_json(rec.path)
    assert old.schema_version == 5 and not any(i.launch_attributes.names for i in old.kernel_instances.values())


def test_clusters_that_do_not_divide_the_grid_or_a_flag_that_is_not_a_boolean_are_refused_by_field(tmp_path):
    rec = make_recording(tmp_path, sizes=(1000,))  # grid (8, 1, 1)
    (key,) = rec.kernel_instances
    data = json.loads(rec.path.read_text())
    for field, value, message in (
        ("ClusterDims", {"x": 3, "y": 1, "z": 1}, r"must tile the grid .*\(3, 1, 1\) .* \(8, 1, 1\)"),
        ("ClusterDims", {"x": 2, "y": 0, "z": 1}, "must be >= 1"),
        ("Cooperative", "yes", "boolean"),
    ):
        bad = json.loads(json.dumps(data))
        bad["instances"][key][field] = value
        rec.path.write_text(json.dumps(bad))
        with pytest.raises(FormatError, match=message) as err:
            RecordedExecution.from_json(rec.path)
        assert f"field 'instances.{key}.{field}" in str(err.value)


def test_a_context_seen_again_launched_another_way_is_not_counted_as_the_same(tmp_path):
    rec = make_recording(tmp_path)
    (key,) = rec.kernel_instances
    inst = rec[key]
    with pytest.raises(UsageError, match="plainly; another launch of it cooperatively"):
        rec.add_instance(
            grid=inst.grid_dim,
            block=inst.block_dim,
            shared_mem=inst.shared_mem,
            args=inst.args,
            prologue=inst.prologue_path,
            epilogue=inst.epilogue_path,
            cooperative=True,
        )
    assert rec[key].occ == 1 and not rec[key].cooperative
    rec.add_instance(
        grid=inst.grid_dim,
        block=inst.block_dim,
        shared_mem=inst.shared_mem,
        args=inst.args,
        prologue=inst.prologue_path,
        epilogue=inst.epilogue_path,
    )
    assert rec[key].occ == 2
