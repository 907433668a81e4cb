"""Recordings in each layout the original Mneme has written open in every command and replay verified.

The recordings come from `original_layouts`, a writer of each layout written from the original's
sources (its docstring names the file and function each field follows), with a bitcode module
(`RecordedIR_<hash>.bc`, made with llvm-as-19) as the current recorder stores it.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest

from mneme.compat import original_format as fmt
from mneme.compat import original_snapshot as snapshots
from mneme.core.errors import MnemeError
from mneme.core.executor import BaseExecutor
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import Snapshot

from .original_files import parse_snapshot
from .original_layouts import (
    INSTANCES,
    LAYOUTS,
    STATIC,
    X_ADDR,
    Y_ADDR,
    epilogue_kinds,
    metadata,
    read_like_the_current_original,
    write_recording,
)

pytestmark = pytest.mark.filterwarnings("ignore")


def mneme(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_the_readers_take_each_field_where_the_original_writes_it(tmp_path):
    db, _ = write_recording(tmp_path / "best", "best")
    assert epilogue_kinds(tmp_path / "best") == {"1111111111111111111": "diff", "2222222222222222222": "full"}
    for dyn in INSTANCES:
        prologue = snapshots.read_snapshot(tmp_path / "best" / f"DeviceState.prologue.{STATIC}.{dyn}.mneme")
        epilogue = snapshots.read_snapshot(
            tmp_path / "best" / f"DeviceState.epilogue.{STATIC}.{dyn}.mneme", base=prologue
        )
        assert prologue.layout == "bytes" and epilogue.layout in ("bytes", "diff")
        assert [b.addr for b in epilogue.blobs] == [X_ADDR, Y_ADDR] and epilogue.args == prologue.args
        x, y = epilogue.blobs
        assert x.metadata == snapshots.Metadata() and x.data == prologue.blobs[0].data
        assert y.metadata == snapshots.Metadata("f32", 1e-5, True, "none", "y")
        before = struct.unpack("1024f", prologue.blobs[1].data)
        expected = [2 * a + b for a, b in zip(struct.unpack("1024f", x.data), before)]
        assert list(struct.unpack("1024f", y.data)) == expected
        assert struct.unpack("<i", epilogue.args[0]) == (1024,) and struct.unpack("<Q", epilogue.args[3]) == (Y_ADDR,)
        theirs = read_like_the_current_original(
            tmp_path / "best" / f"DeviceState.prologue.{STATIC}.{dyn}.mneme",
            tmp_path / "best" / f"DeviceState.epilogue.{STATIC}.{dyn}.mneme",
        )
        assert {a: (n, d, m[4]) for a, (n, d, m) in theirs["epilogue"]["blobs"].items()} == {
            b.addr: (b.actual, bytes(b.data), b.metadata.tag) for b in epilogue.blobs
        }
    assert json.loads(db.read_text())["StaticHash"] == STATIC


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_recording_in_each_layout_replays_verified_with_its_metadata_as_policies(layout, tmp_path):
    db, _ = write_recording(tmp_path / layout, layout)
    rec = RecordedExecution.from_json(db)  # no import step: converted once beside it
    assert rec.path.parent == db.parent / ".mneme-import"
    assert (rec.backend, rec.arch) == ("cuda", "sm_90")  # from the bitcode's triple and target-cpu
    assert [a.kind for a in rec.args] == ["int", "float", "pointer", "pointer"]
    for key in INSTANCES:
        with Snapshot.open(rec[key].epilogue_path, base=Snapshot.open(rec[key].prologue_path)) as epi:
            policy = {r.addr: str(r.policy) for r in epi.regions}
        assert policy[X_ADDR] == "exact"
        assert policy[Y_ADDR] == ("exact" if layout == "documented" else "f32 rel 1e-05 norm none")
        with BaseExecutor(rec.path, key) as ex:
            assert ex.execute(ex.default_config()).verified
    assert RecordedExecution.from_json(db).path == rec.path  # the conversion is reused


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_command_accepts_an_original_database_directly(layout, tmp_path):
    db, _ = write_recording(tmp_path / layout, layout)
    done = mneme("replay", "-rdb", str(db), "-rid", "2222", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout[done.stdout.index("{") :])["result"]["verified"] is True
    done = mneme("inspect", str(db), "--json")
    assert done.returncode == 0, done.stderr
    assert "saxpy" in done.stdout and len(json.loads(done.stdout)) == 1
    done = mneme(
        "tune",
        "-rdb",
        str(db),
        "-rid",
        "1111",
        "--space",
        "quick",
        "--trials",
        "1",
        "--iterations",
        "1",
        "--results",
        str(tmp_path / "tune"),
    )
    assert done.returncode == 0, done.stderr
    done = mneme("copy", str(db), str(tmp_path / "copied"))
    assert done.returncode == 0, done.stderr
    (copied,) = (tmp_path / "copied").glob("*.json")
    assert RecordedExecution.from_json(copied).kernel_name == "saxpy"
    done = mneme("move", str(db), str(tmp_path / "moved"))
    assert done.returncode == 0, done.stderr
    (moved,) = (tmp_path / "moved").glob("*.json")
    assert len(RecordedExecution.from_json(moved)) == 2
    done = mneme("clean", str(db))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_corrupted_byte_in_each_layout_is_never_verified(layout, tmp_path):
    db, marks = write_recording(tmp_path / layout, layout)
    for dyn, (epilogue, offset) in marks.items():
        data = bytearray(epilogue.read_bytes())
        data[offset] ^= 0xFF  # a byte of y's recorded result
        epilogue.write_bytes(bytes(data))
    rec = RecordedExecution.from_json(db)
    for key in INSTANCES:
        with BaseExecutor(rec.path, key) as ex:
            result = ex.execute(ex.default_config())
        assert not result.verified


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_corrupted_structure_in_each_layout_is_a_clear_error(layout, tmp_path):
    db, marks = write_recording(tmp_path / layout, layout)
    epilogue, _ = marks["1111111111111111111"]
    data = bytearray(epilogue.read_bytes())
    data[0] ^= 0x01  # the global count, or the diff's magic
    epilogue.write_bytes(bytes(data))
    before = sorted(p.name for p in db.parent.iterdir())
    with pytest.raises(MnemeError) as info:
        RecordedExecution.from_json(db)
    assert epilogue.name in str(info.value)
    assert sorted(p.name for p in db.parent.iterdir()) == before  # no half conversion left beside it


@pytest.mark.parametrize("layout", ["current", "diff", "best", "bytes", "documented"])
def test_export_then_import_gives_back_the_same_recording(layout, saxpy_db, tmp_path):
    exported = fmt.export_original(saxpy_db, tmp_path / "exported", layout=layout)
    data = json.loads(exported.read_text())
    rec = RecordedExecution.from_json(saxpy_db)
    assert data["StaticHash"] == int(rec.static_hash, 16)  # an integer, as the original passes it to c_uint64
    (key,) = rec.keys()
    epilogue = (tmp_path / "exported" / f"DeviceState.epilogue.{data['StaticHash']}.{key}.mneme").read_bytes()
    if layout in ("current", "diff"):
        assert epilogue.startswith(b"MNEME_DIFF_V1")
    y_metadata = metadata(9, 1e-5, 1, 0)  # saxpy's y: f32, relative 1e-5, per element
    assert (y_metadata in epilogue) == (layout != "documented")
    files = {
        side: tmp_path / "exported" / f"DeviceState.{side}.{data['StaticHash']}.{key}.mneme"
        for side in ("prologue", "epilogue")
    }
    assert [data["instances"][key][side.capitalize()] for side in files] == [str(f) for f in files.values()]
    if layout == "documented":  # the documented version's reader
        read = {side: parse_snapshot(f.read_bytes()) for side, f in files.items()}
        regions = {side: dict(read[side]["blobs"]) for side in read}
    else:  # the current release's readers, metadata and diffs included
        read = read_like_the_current_original(files["prologue"], files["epilogue"])
        regions = {side: {a: d for a, (_n, d, _m) in read[side]["blobs"].items()} for side in read}
        metadata_of = {a: m for a, (_n, _d, m) in read["epilogue"]["blobs"].items()}
    with Snapshot.open(rec[key].prologue_path) as pro, Snapshot.open(rec[key].epilogue_path, base=pro) as epi:
        for side, snap in (("prologue", pro), ("epilogue", epi)):
            assert regions[side] == {r.addr: bytes(snap.read_region(r.addr)) for r in snap.regions}
            assert b"".join(read[side]["args"]) == bytes(snap.args)
        if layout != "documented":
            assert {a: m[:4] for a, m in metadata_of.items()} == {
                r.addr: (9, 1e-5, 1, 0) if not r.policy.exact else (0, 0.0, 0, 0) for r in epi.regions
            }
    back = RecordedExecution.from_json(fmt.import_original(exported, tmp_path / "back"))
    assert (
        back.kernel_name,
        back.static_hash,
        back.backend,
        back.arch,
        back.args,
        back.specializations,
        back.va_addr,
        back.va_size,
    ) == (
        rec.kernel_name,
        rec.static_hash,
        rec.backend,
        rec.arch,
        rec.args,
        rec.specializations,
        rec.va_addr,
        rec.va_size,
    )
    inst, mine = back[key], rec[key]
    assert (inst.grid_dim, inst.block_dim, inst.shared_mem, inst.args, inst.occ) == (
        mine.grid_dim,
        mine.block_dim,
        mine.shared_mem,
        mine.args,
        mine.occ,
    )
    for side in ("prologue", "epilogue"):
        with Snapshot.open(mine.prologue_path) as p1, Snapshot.open(inst.prologue_path) as p2:
            a = Snapshot.open(getattr(mine, f"{side}_path"), base=p1 if side == "epilogue" else None)
            b = Snapshot.open(getattr(inst, f"{side}_path"), base=p2 if side == "epilogue" else None)
            with a, b:
                assert bytes(a.args) == bytes(b.args) and dict(a.globals) == dict(b.globals)
                described = [[(r.addr, r.size, r.policy) for r in s.regions] for s in (a, b)]
                assert described[0] == described[1]
                for r in a.regions:
                    assert bytes(a.read_region(r.addr)) == bytes(b.read_region(r.addr))


def test_import_original_reads_every_layout_with_backend_and_arch_from_the_bitcode(tmp_path):
    for layout in LAYOUTS:
        db, _ = write_recording(tmp_path / layout, layout)
        done = mneme("import-original", str(db), "-o", str(tmp_path / f"{layout}-in"))
        assert done.returncode == 0, done.stderr
        (imported,) = (tmp_path / f"{layout}-in").glob("*.json")
        rec = RecordedExecution.from_json(imported)
        assert (rec.backend, rec.arch, len(rec)) == ("cuda", "sm_90", 2), layout


def test_cleaning_a_database_beside_an_original_one_neither_converts_nor_touches_it(saxpy_db, tmp_path):
    db, _ = write_recording(tmp_path / "both", "diff")
    done = mneme("copy", str(saxpy_db), str(tmp_path / "both"))
    assert done.returncode == 0, done.stderr
    original_files = sorted(p.name for p in (tmp_path / "both").iterdir() if "7411001293580029477" in p.name)
    done = mneme("clean", str(tmp_path / "both" / saxpy_db.name))
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in (tmp_path / "both").iterdir())
    assert left == original_files  # the other database scanned, never converted (no .mneme-import)
    assert RecordedExecution.from_json(db).kernel_name == "saxpy"


def test_a_module_naming_no_target_asks_for_backend_and_arch(tmp_path):
    db, _ = write_recording(tmp_path / "rec", "diff")
    text = tmp_path / "untargeted.ll"
    text.write_text("define void @saxpy(i32 %n, float %a, ptr %x, ptr %y) {\n  ret void\n}\n")
    module = tmp_path / "rec" / f"RecordedIR_{STATIC}.bc"
    subprocess.run([shutil.which("llvm-as-19") or "llvm-as", str(text), "-o", str(module)], check=True)
    with pytest.raises(MnemeError, match="--backend BACKEND --arch ARCH"):
        RecordedExecution.from_json(db)
    assert not (tmp_path / "rec" / ".mneme-import").exists()
    done = mneme("import-original", str(db), "--backend", "host", "--arch", "x86_64", "-o", str(tmp_path / "in"))
    assert done.returncode == 0, done.stderr
    assert RecordedExecution.from_json(next((tmp_path / "in").glob("*.json"))).backend == "host"


def test_clean_and_move_act_on_the_conversion_and_leave_the_originals_files(tmp_path):
    db, _ = write_recording(tmp_path / "rec", "diff")
    originals = sorted(p.name for p in (tmp_path / "rec").iterdir())
    done = mneme("clean", str(db))  # nothing converted yet: nothing converted just to be deleted
    assert done.returncode == 0, done.stderr
    assert "0 database(s)" in done.stdout and f"left {db}" in done.stdout
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == originals
    done = mneme("move", str(db), str(tmp_path / "moved"))
    assert done.returncode == 0, done.stderr
    assert "kept" not in done.stdout  # the conversion is not "another database" of its own files
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == originals  # no .mneme-import left behind
    (moved,) = (tmp_path / "moved").glob("*.json")
    assert len(RecordedExecution.from_json(moved)) == 2 and len(list((tmp_path / "moved").iterdir())) == 6
    RecordedExecution.from_json(db)  # converted again
    assert (tmp_path / "rec" / fmt.IMPORT_FOLDER).is_dir()
    done = mneme("clean", str(db))
    assert done.returncode == 0, done.stderr
    assert "1 database(s), 5 file(s) removed" in done.stdout and f"left {db}" in done.stdout
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == originals


def test_import_reads_files_outside_the_databases_folder_only_when_allowed(tmp_path):
    db, _ = write_recording(tmp_path / "rec", "documented")  # absolute paths, as the documented version wrote
    data = json.loads(db.read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    module = elsewhere / "secret.bc"
    shutil.move(data["Modules"][0], module)
    data["Modules"] = [str(module)]
    db.write_text(json.dumps(data))
    with pytest.raises(MnemeError, match="outside the database's folder.*--allow-files-outside") as err:
        RecordedExecution.from_json(db)
    assert "Modules" in str(err.value)
    done = mneme("import-original", str(db), "-o", str(tmp_path / "in"))
    assert done.returncode == 2 and "outside the database's folder" in done.stderr
    done = mneme("import-original", str(db), "-o", str(tmp_path / "in"), "--allow-files-outside")
    assert done.returncode == 0, done.stderr
    (imported,) = (tmp_path / "in").glob("*.json")
    assert len(RecordedExecution.from_json(imported)) == 2
    # A relative path leading out is the same case; an absolute path inside the folder is read.
    data["Modules"] = ["../elsewhere/secret.bc"]
    db.write_text(json.dumps(data))
    with pytest.raises(MnemeError, match="outside the database's folder"):
        fmt.import_original(db, tmp_path / "again")
    shutil.move(module, tmp_path / "rec" / "secret.bc")
    data["Modules"] = [str(tmp_path / "rec" / "secret.bc")]
    db.write_text(json.dumps(data))
    assert len(RecordedExecution.from_json(fmt.import_original(db, tmp_path / "again"))) == 2
