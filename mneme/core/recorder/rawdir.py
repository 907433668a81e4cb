"""The raw folder a native recorder writes: launch manifests, counts, raw dumps, verification policies.

`RawFormat` names one backend's files (its manifest and counts formats) and says how its code
images read; everything else is the same for every backend.
"""

from __future__ import annotations

import json
import mmap
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from mneme.core.errors import FormatError, UsageError
from mneme.core.launching import cluster_misfit


@attrs.frozen
class RawFormat:
    """What one backend's native recorder writes, and what finalize needs to know of its device.

    `manifest`, `counts`: the "format" names of its launch manifests and counts files.
    `granularity`: the device's address-range granularity (a database's VASize is a multiple).
    `kernel_image(data, kernel, arch, where)`: the loadable image of `kernel` in a code image the
    recorder saved, and its kind ("cubin", "ptx", ...); None when it does not define the kernel.
    `kernel_timer`: the timer name of launch times taken from the device's kernel timestamps.
    `graphs`: what the device API calls its graphs of launches, for messages.
    """

    backend: str
    manifest: str
    counts: str
    granularity: int
    default_arch: str
    kernel_image: Callable[[bytes, str, str, str], tuple[bytes, str] | None]
    kernel_timer: str = "kernel"
    graphs: str = "graphs"
    #: `ir_numerics(image, arch)`: the application's floating-point behaviour read from a code image the
    #: recorder saved, as (description, rewrite of a module's IR text) that gives the IR the same numerics;
    #: None where the image does not say. None: the backend cannot tell.
    ir_numerics: Callable[[bytes, str], tuple[str, Callable[[str], str]] | None] | None = None


# Launch manifests: 1, raw dumps (prologue.bin, epilogue.bin) that finalize converts; 2, snapshot
# files the recorder wrote itself (prologue.mneme, epilogue.mneme) that finalize moves into place.
MANIFEST_VERSIONS = (1, 2)


def launches(fmt: RawFormat, raw_dir: Path) -> list[tuple[Path, dict]]:
    """Every complete launch folder the recorder wrote (incomplete `.tmp` folders are skipped)."""
    found = []
    for folder in sorted(Path(raw_dir).glob("launch-*")):
        if folder.name.endswith(".tmp") or not (folder / "manifest.json").exists():
            continue
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FormatError(folder / "manifest.json", f"unreadable recorder manifest: {exc}") from exc
        if manifest.get("format") != fmt.manifest or manifest.get("version") not in MANIFEST_VERSIONS:
            raise FormatError(
                folder / "manifest.json",
                f"not a {fmt.manifest} manifest of version "
                f"{' or '.join(map(str, MANIFEST_VERSIONS))}; record again with this Mneme",
                field="format",
            )
        found.append((folder, manifest))
    return found


def _counts_files(raw_dir: Path) -> Iterator[tuple[Path, dict]]:
    """Each process's counts-<pid>.json in `raw_dir`, read; FormatError naming one that cannot be read."""
    for path in sorted(Path(raw_dir).glob("counts-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FormatError(path, f"unreadable recorder counts: {exc}") from exc
        yield path, data


def occurrences(fmt: RawFormat, raw_dir: Path) -> dict[tuple[str, str], int]:
    """(kernel, instance key) -> launches with that argument set, over every recorded process."""
    total: dict[tuple[str, str], int] = defaultdict(int)
    for path, data in _counts_files(raw_dir):
        if data.get("format") != fmt.counts or data.get("version") != 1:
            raise FormatError(path, f"not a version-1 {fmt.counts} file", field="format")
        for kernel, entry in data.get("kernels", {}).items():
            for key, count in entry.get("instances", {}).items():
                total[(kernel, key)] += int(count)
    return dict(total)


def in_application(
    fmt: RawFormat, raw_dir: Path
) -> tuple[dict[tuple[str, str], list[float]], dict[str, int], dict[tuple[str, str], str]]:
    """What the recorder measured inside the application, over every recorded process:
    (kernel, instance key) -> seconds of each timed launch, kernel -> launches inside graphs,
    and (kernel, instance key) -> the timer of those seconds: `fmt.kernel_timer` (the GPU's kernel
    timestamps, "kernel_times") where any process had them, else "events" ("app_times")."""
    kernel_timer = fmt.kernel_timer
    by_timer: dict[str, dict[tuple[str, str], list[float]]] = {
        kernel_timer: defaultdict(list),
        "events": defaultdict(list),
    }
    graphs: dict[str, int] = defaultdict(int)
    for path, data in _counts_files(raw_dir):
        for kernel, entry in data.get("kernels", {}).items():
            if entry.get("graph_launches"):
                graphs[kernel] += int(entry["graph_launches"])
            for field, timer in (("kernel_times", kernel_timer), ("app_times", "events")):
                for key, seconds in entry.get(field, {}).items():
                    if not isinstance(seconds, list) or not all(isinstance(t, (int, float)) and t > 0 for t in seconds):
                        raise FormatError(
                            path,
                            f"expected positive seconds, got {seconds!r}"[:200],
                            field=f"kernels.{kernel}.{field}.{key}",
                        )
                    by_timer[timer][(kernel, key)] += [float(t) for t in seconds]
    times: dict[tuple[str, str], list[float]] = {}
    timers: dict[tuple[str, str], str] = {}
    for timer in ("events", kernel_timer):  # kernel timestamps win: the two do not mix
        for instance, seconds in by_timer[timer].items():
            if seconds:
                times[instance], timers[instance] = seconds, timer
    return times, dict(graphs), timers


def recorded_times(raw_dir: Path) -> dict[tuple[str, str], tuple[float, str]]:
    """(kernel, instance key) -> (seconds, cache state) of the recorded launch itself, as the recorder timed it."""
    return _cached_times(raw_dir, "recorded_time")


def retimed_times(raw_dir: Path) -> dict[tuple[str, str], tuple[float, str]]:
    """(kernel, instance key) -> (seconds, cache state) of the recorded launch run and timed a second time, from
    its restored prologue (MNEME_RECORD_RETIME=1; counts files without it have none)."""
    return _cached_times(raw_dir, "retimed_time")


def retimed_image_times(raw_dir: Path) -> dict[tuple[str, str], tuple[float, str]]:
    """(kernel, instance key) -> (seconds, cache state) of the recorded launch timed a third time, through its
    recorded code image loaded anew in the application's process, as a replay loads it
    (MNEME_RECORD_RETIME=image)."""
    return _cached_times(raw_dir, "retimed_image_time")


def retime_facts(raw_dir: Path) -> dict[str, dict[str, str]]:
    """kernel -> {fact: value} that MNEME_RECORD_RETIME=image noted: function attributes that differ between the
    application's function and the recorded image's ("application / image"), and the application's context limits."""
    out: dict[str, dict[str, str]] = {}
    for path, data in _counts_files(raw_dir):
        for kernel, entry in data.get("kernels", {}).items():
            facts = entry.get("retime_facts") or {}
            if not isinstance(facts, dict) or not all(isinstance(v, str) for v in facts.values()):
                raise FormatError(
                    path, f"expected {{fact: text}}, got {facts!r}"[:200], field=f"kernels.{kernel}.retime_facts"
                )
            if facts:
                out.setdefault(kernel, {}).update(facts)
    return out


def _cached_times(raw_dir: Path, field: str) -> dict[tuple[str, str], tuple[float, str]]:
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for path, data in _counts_files(raw_dir):
        for kernel, entry in data.get("kernels", {}).items():
            for key, timing in (entry.get(field) or {}).items():
                seconds = timing.get("seconds") if isinstance(timing, dict) else None
                cache = timing.get("cache") if isinstance(timing, dict) else None
                if (
                    not isinstance(seconds, (int, float))
                    or isinstance(seconds, bool)
                    or not seconds > 0
                    or cache not in ("flushed", "warm")
                ):
                    raise FormatError(
                        path,
                        f"expected {{'seconds': > 0, 'cache': 'flushed' or 'warm'}}, got {timing!r}"[:200],
                        field=f"kernels.{kernel}.{field}.{key}",
                    )
                out[(kernel, key)] = (float(seconds), cache)
    return out


@attrs.frozen
class Unrecorded:
    """A kernel that ran under the recorder but has no recorded launch, and what the recorder said why."""

    kernel: str
    launches: int  # launches the recorder saw (selected, run directly)
    graph_launches: int  # kernel nodes run inside graphs the recorder could not run node by node (not recorded)
    reasons: dict  # why -> launches, as the recorder counted them


def unrecorded(fmt: RawFormat, raw_dir: Path) -> list[Unrecorded]:
    """Kernels that ran (launches counted in counts-*.json) but of which no launch folder is complete."""
    recorded = {manifest["kernel"] for _, manifest in launches(fmt, raw_dir)}
    seen: dict[str, int] = defaultdict(int)
    graphs: dict[str, int] = defaultdict(int)
    reasons: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for _, data in _counts_files(raw_dir):
        for kernel, entry in data.get("kernels", {}).items():
            seen[kernel] += int(entry.get("seen", 0))
            graphs[kernel] += int(entry.get("graph_launches", 0))
            for why, n in (entry.get("unrecorded") or {}).items():
                reasons[kernel][why] += int(n)
    # A launch the recorder let pass before counting it (one made while a graph was being captured,
    # one whose arguments it could not read) has only its reason; those inside graphs also count in
    # `graph_launches`. So the direct launches are at least the reasons less the graphs' ones.
    direct = {kernel: max(seen[kernel], sum(reasons[kernel].values()) - graphs[kernel]) for kernel in reasons}
    return [
        Unrecorded(kernel, direct.get(kernel, seen[kernel]), graphs[kernel], dict(reasons[kernel]))
        for kernel in sorted(set(seen) | set(graphs) | set(reasons))
        if kernel not in recorded and (seen[kernel] or graphs[kernel] or reasons[kernel])
    ]


def incomplete_launches(raw_dir: Path) -> list[Path]:
    """Launch folders the recorder began and never completed (the process ended before its writer did)."""
    return sorted(p for p in Path(raw_dir).glob("launch-*.tmp") if p.is_dir())


def raw_regions(folder: Path, name: str, manifest: dict):
    """(addr, memoryview) of each region and {name: memoryview} of each global in a dump file, mapped."""
    path = folder / name
    regions = manifest["regions"]
    globals_ = manifest.get("globals", [])
    size = sum(s for _, s in regions) + sum(s for _, _, s in globals_)
    if path.stat().st_size != size:
        raise FormatError(
            path,
            f"holds {path.stat().st_size} bytes; the manifest's regions and globals add up to "
            f"{size}; the recording is damaged, record again",
        )
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    view = memoryview(mapped)
    offset = 0
    out = []
    for addr, length in regions:
        out.append((addr, view[offset : offset + length]))
        offset += length
    values = {}
    for global_name, _addr, length in globals_:
        values[global_name] = view[offset : offset + length]
        offset += length
    return out, values


EPILOGUE_FORMATS = ("diff", "bytes", "best")
# How snapshot regions are compressed (`mneme record --compression`, MNEME_RECORD_COMPRESSION):
# LZ4 restores about twice as fast as zstd for a few percent more disk; "none" stores them raw.
COMPRESSIONS = ("lz4", "zstd", "none")


def check_compression(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise UsageError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")


def region_encoding(compression: str) -> str:
    """The Python writer's region encoding for `compression` (zstd where liblz4 is missing, with a warning)."""
    from mneme.core.snapshot import codec  # lazily: it loads numpy, which a raw folder's scan does not need

    return codec.writable_encoding({"lz4": "lz4", "zstd": "zstd", "none": "raw"}[compression])


def region_policies(manifest: dict, where: str = "<manifest>") -> dict:
    """{region address: RegionPolicy} from a launch manifest's "policies" (mneme_annotate calls).

    Each entry is {"addr", "dtype", "threshold", "relative", "norm", "tag"}; the tag names the
    buffer in messages only. Entries for addresses that are not a recorded region are ignored.
    """
    from mneme.core.snapshot import RegionPolicy  # lazily: as above (numpy)

    regions = {addr for addr, _ in manifest.get("regions", [])}
    out = {}
    for entry in manifest.get("policies", []):
        try:
            policy = RegionPolicy(
                dtype=entry["dtype"],
                threshold=entry["threshold"],
                relative=entry.get("relative", False),
                norm=entry.get("norm", "none"),
            )
            addr = int(entry["addr"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(where, f"invalid verification policy {entry!r}: {exc}", field="policies") from exc
        if addr in regions:
            out[addr] = policy
    return out


def launch_fields(manifest: dict, where: Path | str = "<manifest>") -> dict:
    """The launch's attributes from a manifest, as `RecordedExecution.add_instance` takes them.

    "cooperative" (boolean) and "cluster" ([x, y, z] blocks; zeros: no clusters) are absent from
    manifests of recorders before them, which recorded every launch as a plain one.
    """
    cooperative = manifest.get("cooperative", False)
    if not isinstance(cooperative, bool):
        raise FormatError(where, f"expected true or false, got {cooperative!r}"[:200], field="cooperative")
    cluster = manifest.get("cluster", [0, 0, 0])
    if (
        not isinstance(cluster, list)
        or len(cluster) != 3
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cluster)
    ):
        raise FormatError(
            where, f"expected three block counts (zeros: no clusters), got {cluster!r}"[:200], field="cluster"
        )
    if any(cluster) and not all(cluster):
        raise FormatError(where, f"a cluster of {cluster} blocks has an empty dimension", field="cluster")
    if any(cluster):
        grid = manifest.get("grid")
        if not isinstance(grid, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in grid):
            raise FormatError(where, f"expected the grid's block counts, got {grid!r}"[:200], field="grid")
        misfit = cluster_misfit(grid, cluster)
        if misfit:
            raise FormatError(where, misfit, field="cluster")
    return {"cooperative": cooperative, "cluster_dim": tuple(cluster) if any(cluster) else None}


def mostly_rewritten(before, after) -> bool:
    """Whether more than half of a region's bytes changed (a diff would store it nearly whole)."""
    import numpy as np

    if len(before) == 0:
        return False
    a, b = np.frombuffer(before, dtype=np.uint8), np.frombuffer(after, dtype=np.uint8)
    return int(np.count_nonzero(a != b)) * 2 > len(a)
