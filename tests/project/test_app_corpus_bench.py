"""benchmarks/gpu/bench_app_corpus.py reads what the CUDA recorder wrote (issue 38): each run's recorded launch
time by the instance's dynamic hash (the key its database uses), and every launch the recorder saw, graph
launches included, to set against CUPTI's count."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

pytest.importorskip("mneme_cuda.recorder")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
BASE = 0x153940000000
KEY = "00000000000000aa"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_app_corpus

    return bench_app_corpus


def _launch(raw: Path, pid: int, seq: int, pointer: int, key: str) -> bytes:
    """Launch folder `seq` of process `pid`: a saxpy (grid 4, block 256) reading and writing at `pointer`, recorded
    as instance `key`; its packed arguments."""
    folder = raw / f"launch-{pid}-{seq:06d}"
    folder.mkdir(parents=True)
    args = struct.pack("<ifQQ", 16, 2.0, pointer, pointer + (2 << 20))
    manifest = {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": "saxpy",
        "instance_key": key,
        "grid": [4, 1, 1],
        "block": [256, 1, 1],
        "shared_mem": 0,
        "va_base": BASE,
        "va_size": 1 << 40,
        "args": args.hex(),
        "params": [[0, 4], [4, 4], [8, 8], [16, 8]],
        "regions": [],
        "globals": [],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return args


def _raw(tmp_path: Path, cache: str) -> tuple[Path, bytes]:
    raw = tmp_path / "raw"
    args = _launch(raw, 5, 0, BASE, KEY)
    counts = {
        "saxpy": {
            "seen": 3,
            "instances": {KEY: 3},
            "recorded_time": {KEY: {"seconds": 3.5e-6, "cache": cache}},
            "retimed_time": {KEY: {"seconds": 3.9e-6, "cache": cache}},  # MNEME_RECORD_RETIME's second time
            "retimed_image_time": {KEY: {"seconds": 4.2e-6, "cache": cache}},  # =image: through the image
            "retime_facts": {"function attribute 9": "100 / 0", "context stack size": "1024"},
        },
        "relax": {"seen": 0, "graph_launches": 4},
        "never": {"seen": 0},
    }
    (raw / "counts-5.json").write_text(json.dumps({"format": "mneme-cuda-counts", "version": 1, "kernels": counts}))
    return raw, args


# The one saxpy launch of `_raw`, by its place: kernel, grid, block, shared memory, no such launch before it.
PLACE = ("saxpy", (4, 1, 1), (256, 1, 1), 0, 0)


def test_a_runs_recorded_launch_time_is_keyed_by_the_instances_dynamic_hash(bench, tmp_path):
    from mneme.core.records.model import dynamic_hash_of

    raw, args = _raw(tmp_path, "flushed")
    key = ("saxpy", dynamic_hash_of([4, 1, 1], [256, 1, 1], 0, args))
    assert bench.raw_recorded_launches(raw) == [(key, PLACE, 3.5e-6)]


def test_a_recorded_launch_timed_from_a_warm_l2_is_no_sample_of_the_flushed_reference(bench, tmp_path):
    raw, _ = _raw(tmp_path, "warm")
    assert bench.raw_recorded_launches(raw) == []
    assert bench.raw_recorded_launches(raw, "retimed") == [] == bench.raw_recorded_launches(raw, "image")


def test_the_recorded_launchs_second_time_is_read_apart_from_its_first(bench, tmp_path):
    from mneme.core.records.model import dynamic_hash_of

    raw, args = _raw(tmp_path, "flushed")
    key = ("saxpy", dynamic_hash_of([4, 1, 1], [256, 1, 1], 0, args))
    assert bench.raw_recorded_launches(raw, "retimed") == [(key, PLACE, 3.9e-6)]
    assert bench.raw_recorded_launches(raw, "image") == [(key, PLACE, 4.2e-6)]
    assert bench.raw_recorded_launches(raw) == [(key, PLACE, 3.5e-6)]


def test_the_facts_of_the_image_retime_are_read_per_kernel_and_a_malformed_one_names_its_field(bench, tmp_path):
    from mneme.core.errors import FormatError
    from mneme.core.recorder.rawdir import retime_facts

    raw, _ = _raw(tmp_path, "flushed")
    assert retime_facts(raw) == {"saxpy": {"function attribute 9": "100 / 0", "context stack size": "1024"}}
    path = raw / "counts-5.json"
    data = json.loads(path.read_text())
    data["kernels"]["saxpy"]["retime_facts"] = {"context stack size": 1024}
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="retime_facts"):
        retime_facts(raw)


def test_the_recorders_launch_count_holds_graph_launches_and_leaves_out_kernels_never_launched(bench, tmp_path):
    raw, _ = _raw(tmp_path, "flushed")
    assert bench.recorder_launches(raw) == {"saxpy": 3, "relax": 4}


def test_ir_variants_are_parsed_as_configuration_fields_and_summarized_against_the_binary(bench):
    name, fields = bench.parse_variant("sched4reg:nvptx_sched4reg=true,unroll_threshold=1200")
    assert (name, fields) == ("sched4reg", {"nvptx_sched4reg": True, "unroll_threshold": 1200})
    row = {
        "program": "llama.cpp",
        "kernel": "k_get_rows_kq",
        "occurrences": 1,
        "binary": "cubin",
        "binary_verified": True,
        "binary_median_s": 2.0e-6,
        "ir": True,
        "ir_verified": True,
        "ir_vs_binary": 1.25,
        "ir_variants": {
            "sched4reg": {"verified": True, "median_s": 2.04e-6, "ir_vs_binary": 1.02},
            "broken": {"error": "UsageError: no such field"},
        },
    }
    slow = {**row, "ir_variants": {"sched4reg": {"verified": False, "median_s": 2.4e-6, "ir_vs_binary": 1.2}}}
    lines = bench.summarize([row, slow], [])
    assert "app-corpus IR variant sched4reg: 1/2 verified bit for bit; IR/binary time within 5%: 1/2" in lines[-2]
    assert lines[-1].startswith("app-corpus IR variant broken: 0/1 verified bit for bit; IR/binary time within 5%: 0/0")
    (table_row,) = [line for line in bench.markdown([row], []) if "k_get_rows_kq" in line]
    assert "IR sched4reg 1.02, IR broken failed" in table_row


def test_a_later_time_of_the_recorded_launch_is_summarized_against_the_first_and_the_replay(bench):
    """Two instances: one whose replay matches the recorded time; one whose replay missed it by 20% while the time
    through the recorded image matches the replay, not the recorded launch (the code object would be the cause)."""
    rows = [
        {"replay_vs_recorded": 1.01, "image_vs_recorded": 1.0, "replay_vs_image": 1.01},
        {"replay_vs_recorded": 1.20, "image_vs_recorded": 1.19, "replay_vs_image": 1.008},
        {"replay_vs_recorded": 1.30},  # no image time: not counted
    ]
    line = bench.later_time_line(rows, "image", "through the image")
    assert line == (
        "app-corpus through the image, 2 instances: image/recorded median 1.095x; replay within 5% of it 2/2; "
        "of the 1 whose replay missed the recorded time, image/recorded within 5% 0, replay/image within 5% 1"
    )
    assert bench.later_time_line(rows, "retimed", "timed again") == ""


def test_the_replays_with_the_ranges_touched_before_the_flush_are_counted_within_five_percent(bench):
    """--before-flush: each way of touching the recorded ranges before the flush gets its own line, counting the
    instances whose replay that way came within 5% of the recorded launch (an instance without it is left out)."""
    row = {
        "program": "torch",
        "kernel": "vectorized_elementwise_kernel",
        "binary": "cubin",
        "binary_verified": True,
        "ir": False,
        "replay_vs_recorded": 0.86,
        "before_flush_vs_recorded": {"read": 1.03, "rewrite": 1.09},
    }
    rows = [
        row,
        {**row, "replay_vs_recorded": 1.01, "before_flush_vs_recorded": {"read": 0.97, "rewrite": 1.02}},
        {**row, "before_flush_vs_recorded": {"read": 0.90}},
    ]
    lines = [line for line in bench.summarize(rows, []) if "before each flush" in line]
    assert lines == [
        "app-corpus replay, recorded ranges before each flush: read (--before-flush; its own executor): "
        "within 5% 2/3, median 0.970x",
        "app-corpus replay, recorded ranges before each flush: rewrite (--before-flush; its own executor): "
        "within 5% 1/2, median 1.055x",
    ]


def _run_folder(tmp_path: Path, name: str, launches: list[tuple[int, str, float]]) -> Path:
    """A raw folder of one process whose saxpy launches (`_launch`) read and write at `pointer` and were recorded
    as instance `key`, each timed from a flushed L2 in `seconds`, in this order."""
    raw = tmp_path / name
    times = {}
    for seq, (pointer, key, seconds) in enumerate(launches):
        _launch(raw, 7, seq, pointer, key)
        times[key] = {"seconds": seconds, "cache": "flushed"}
    counts = {"saxpy": {"seen": len(launches), "recorded_time": times}}
    (raw / "counts-7.json").write_text(json.dumps({"format": "mneme-cuda-counts", "version": 1, "kernels": counts}))
    return raw


def test_a_further_runs_instance_at_other_addresses_is_matched_to_the_first_runs_by_its_place(bench, tmp_path):
    """The second saxpy's arguments point elsewhere in the further run (an allocator's choice), so its dynamic hash
    differs: its time still joins the first run's second instance, by kernel, shape and order. The first instance
    matches by its own key, and a launch with no counterpart gives nothing."""
    first = _run_folder(tmp_path, "first", [(BASE, "k1", 3.0e-6), (BASE + (8 << 20), "k2", 5.0e-6)])
    further = _run_folder(
        tmp_path,
        "further",
        [(BASE, "k1", 3.1e-6), (BASE + (12 << 20), "k2", 5.2e-6), (BASE + (16 << 20), "k3", 7.0e-6)],
    )
    launched = bench.raw_recorded_launches(first)
    assert [place for _, place, _ in launched] == [
        ("saxpy", (4, 1, 1), (256, 1, 1), 0, 0),
        ("saxpy", (4, 1, 1), (256, 1, 1), 0, 1),
    ]
    (one, _), (two, _) = [(key, place) for key, place, _ in launched]
    assert one != two
    matched = bench.times_of_the_first_runs_instances(
        [(key, place) for key, place, _ in launched], bench.raw_recorded_launches(further)
    )
    assert matched == {one: 3.1e-6, two: 5.2e-6}


def test_an_instance_matched_by_its_own_key_is_not_taken_again_by_another_launchs_place(bench, tmp_path):
    """In the further run the first instance comes second (its own key, other place) and an unknown launch holds
    the first instance's place: the instance keeps its own time, once, and the unknown launch gives nothing."""
    first = _run_folder(tmp_path, "first", [(BASE, "k1", 3.0e-6)])
    further = _run_folder(tmp_path, "further", [(BASE + (8 << 20), "k9", 9.0e-6), (BASE, "k1", 3.2e-6)])
    launched = [(key, place) for key, place, _ in bench.raw_recorded_launches(first)]
    matched = bench.times_of_the_first_runs_instances(launched, bench.raw_recorded_launches(further))
    assert matched == {launched[0][0]: 3.2e-6}
