"""Finalize: turn a native recorder's raw folder into one recording database per kernel.

Each kernel's IR comes from `--ir` files or the IR-source plugins, and is checked against the
recorded parameter layout; the code image the driver loaded is stored beside it; the recorder's
own snapshots are checked against their manifest and moved under their database names (older
raw-dump folders are converted). docs/design/recording.md.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from mneme.core import ir as irmod
from mneme.core.console import current
from mneme.core.elf import elf_files_from_maps
from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.fsutil import atomic_write
from mneme.core.irsource import resolve
from mneme.core.recorder.rawdir import (
    EPILOGUE_FORMATS,
    RawFormat,
    check_compression,
    in_application,
    incomplete_launches,
    launch_fields,
    launches,
    mostly_rewritten,
    occurrences,
    raw_regions,
    recorded_times,
    region_encoding,
    region_policies,
    unrecorded,
)
from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of
from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter
from mneme.core.snapshot.format import EXACT

log = logging.getLogger(__name__)


def finalize(
    fmt: RawFormat,
    raw_dir: Path,
    out: Path,
    ir_files: Sequence[Path] = (),
    arch: str = "",
    epilogue_format: str = "diff",
    compression: str = "lz4",
) -> list[Path]:
    """Write one recording database per recorded kernel into `out`; returns their paths.

    A kernel's IR comes from the `ir_files` that define it, else from the IR-source plugins
    (IR that `mneme-cc` embedded in the files the process loaded, Triton's cache); IR whose
    parameters differ from the recorded layout is dropped with a warning. The code image the
    driver loaded is stored too (`BinaryBlobs`), so a kernel without IR replays from it
    (`--mode cubin|ptx`). A kernel with neither is skipped with a warning.

    `epilogue_format`: "diff" (each region as a diff against the prologue), "bytes" (each
    region whole, zstd), "best" (whole for regions the kernel mostly rewrote, else a diff);
    it applies to raw-dump (version 1) launch folders: the recorder writes version-2 folders'
    snapshots itself, as `mneme record --epilogue-format` told it (MNEME_RECORD_EPILOGUE_FORMAT).
    `compression` ("lz4", "zstd", "none") applies to raw-dump folders too; the recorder
    compresses version-2 folders' snapshots as MNEME_RECORD_COMPRESSION told it.
    Regions the application annotated (mneme_annotate, mneme.annotate) get that verification
    policy in both snapshots; the others compare exactly.
    """
    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    check_compression(compression)
    encoding = None  # chosen at the first raw-dump folder (it may warn)
    raw_dir, out = Path(raw_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    arch = arch or fmt.default_arch
    counted = occurrences(fmt, raw_dir)
    timed, _, timers = in_application(fmt, raw_dir)
    first_timed = recorded_times(raw_dir)
    elf_files = loaded_elf_files(raw_dir)
    by_kernel: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for folder, manifest in launches(fmt, raw_dir):
        by_kernel[manifest["kernel"]].append((folder, manifest))
    written = []
    for kernel, items in sorted(by_kernel.items()):
        recorded = [tuple(p) for p in items[0][1]["params"]]
        image = raw_image = None
        for _, manifest in items:
            name = manifest.get("image") or ""
            if name and (raw_dir / name).is_file():
                raw_image = (raw_dir / name).read_bytes()
                image = fmt.kernel_image(raw_image, kernel, arch, str(raw_dir / name))
                if image is not None:
                    break
        stored, ir_source = _resolve_ir(kernel, ir_files, out, arch, elf_files, image[0] if image else None)
        if stored and image is not None and fmt.ir_numerics is not None:
            stored = _with_application_numerics(kernel, stored, fmt.ir_numerics(raw_image, arch), out)
        params = None
        if stored:
            try:
                linked = irmod.link(stored, kernel)
                params = irmod.kernel_params(linked, kernel)
            except MnemeError as exc:
                log.warning(
                    "kernel %s: its IR (from %s) does not link: %s; recorded without IR", kernel, ir_source, exc
                )
                stored = []
        if stored and [(p.offset, p.size) for p in params] != recorded:
            log.warning(
                "kernel %s: the IR's parameters %s (from %s) differ from the recorded layout %s; "
                "recorded without IR (binary only)",
                kernel,
                [(p.offset, p.size) for p in params],
                ir_source,
                recorded,
            )
            stored = []
        if not stored and image is None:
            log.warning(
                "kernel %s: neither IR nor a loaded code image was found; not written (pass --ir with its "
                "device IR, or build the application with mneme-cc)",
                kernel,
            )
            continue
        if stored:
            static_hash = irmod.module_hash(linked)[:16]
            args = [
                ArgInfo(
                    p.name,
                    p.offset,
                    p.size,
                    p.kind if p.kind in ("pointer", "int", "float", "struct") else "unknown",
                    p.kind in ("int", "float"),
                )
                for p in params
            ]
        else:
            static_hash = hashlib.sha256(kernel.encode() + b"\0" + image[0]).hexdigest()[:16]
            args = [ArgInfo(f"arg{i}", offset, size, "unknown", False) for i, (offset, size) in enumerate(recorded)]
        blobs = []
        if image is not None:
            code = out / "code" / f"{static_hash}.{image[1]}"
            code.parent.mkdir(parents=True, exist_ok=True)
            if not code.exists():
                atomic_write(code, image[0])
            blobs.append((code, image[1]))
        regions = [r for _, m in items for r in m["regions"]]
        base = items[0][1]["va_base"]
        end = max((a + s for a, s in regions), default=base + fmt.granularity)
        va_size = -(-(end - base) // fmt.granularity) * fmt.granularity
        globals_sizes = {g[0]: g[2] for _, m in items for g in m.get("globals", [])}
        db_path = out / f"{static_hash}.json"
        rec = (
            RecordedExecution.from_json(db_path)
            if db_path.exists()
            else RecordedExecution.create(
                out,
                kernel_name=kernel,
                static_hash=static_hash,
                backend=fmt.backend,
                arch=arch,
                modules=stored,
                binary_blobs=blobs,
                args=args,
                va_addr=base,
                va_size=va_size,
                globals=globals_sizes,
            )
        )
        rec.va_size = max(rec.va_size, va_size)
        rec.globals.update(globals_sizes)
        for folder, manifest in items:
            arg_bytes = bytes.fromhex(manifest["args"])
            grid, block, shared = manifest["grid"], manifest["block"], manifest["shared_mem"]
            dynamic = dynamic_hash_of(grid, block, shared, arg_bytes)
            occ = max(counted.get((kernel, manifest.get("instance_key", "")), 1), 1)
            launch = launch_fields(manifest, folder / "manifest.json")
            if dynamic in rec.kernel_instances:
                rec.add_instance(
                    grid=grid,
                    block=block,
                    shared_mem=shared,
                    args=arg_bytes,
                    prologue=rec.kernel_instances[dynamic].prologue_path,
                    epilogue=rec.kernel_instances[dynamic].epilogue_path,
                    occurrences=occ,
                    **launch,
                )
                continue
            prologue_path = out / f"DeviceState.prologue.{static_hash}.{dynamic}.mneme"
            epilogue_path = out / f"DeviceState.epilogue.{static_hash}.{dynamic}.mneme"
            policies = region_policies(manifest, str(folder / "manifest.json"))
            if manifest["version"] >= 2:  # the recorder wrote the snapshots itself: check them, move them
                _place_snapshots(folder, manifest, policies, prologue_path, epilogue_path)
            else:
                encoding = encoding or region_encoding(compression)
                before, globals_before = raw_regions(folder, "prologue.bin", manifest)
                after, globals_after = raw_regions(folder, "epilogue.bin", manifest)
                with SnapshotWriter(
                    prologue_path, SnapshotType.PROLOGUE, static_hash=static_hash, dynamic_hash=dynamic
                ) as writer:
                    writer.set_args(arg_bytes, layout=recorded)
                    for addr, data in before:
                        writer.add_region(addr, data, encoding=encoding, policy=policies.get(addr))
                    for name, data in globals_before.items():
                        writer.add_global(name, bytes(data))
                with SnapshotWriter(
                    epilogue_path, SnapshotType.EPILOGUE, static_hash=static_hash, dynamic_hash=dynamic
                ) as writer:
                    writer.set_args(arg_bytes, layout=recorded)
                    for (addr, data), (_, base_data) in zip(after, before):
                        whole = epilogue_format == "bytes" or (
                            epilogue_format == "best" and mostly_rewritten(base_data, data)
                        )
                        if whole:
                            writer.add_region(addr, data, encoding=encoding, policy=policies.get(addr))
                        else:
                            writer.add_diff_region(addr, base_data, data, policy=policies.get(addr))
                    for name, data in globals_after.items():
                        writer.add_global(name, bytes(data))
            rec.add_instance(
                grid=grid,
                block=block,
                shared_mem=shared,
                args=arg_bytes,
                prologue=prologue_path,
                epilogue=epilogue_path,
                dynamic_hash=dynamic,
                occurrences=occ,
                **launch,
            )
        for dynamic, key in {
            dynamic_hash_of(m["grid"], m["block"], m["shared_mem"], bytes.fromhex(m["args"])): m.get("instance_key", "")
            for _, m in items
        }.items():
            # set, not added: finalizing the same raw folder twice gives the same times
            if timed.get((kernel, key)) and dynamic in rec.kernel_instances:
                rec[dynamic].app_times = list(timed[(kernel, key)])
                rec[dynamic].app_timer = timers[(kernel, key)]
            if (kernel, key) in first_timed and dynamic in rec.kernel_instances:
                rec[dynamic].recorded_time, rec[dynamic].recorded_cache = first_timed[(kernel, key)]
        rec.save()
        log.info(
            "kernel %s: %d instances, %s",
            kernel,
            len(rec.kernel_instances),
            f"IR from {ir_source}" if stored else f"binary only ({image[1]})",
        )
        written.append(db_path)
    return written


def _place_snapshots(folder: Path, manifest: dict, policies: dict, prologue_path: Path, epilogue_path: Path) -> None:
    """Check the recorder's own snapshots of one launch against its manifest, then move them into place.

    Their META names no static or dynamic hash (the recorder cannot know the code's identity
    before its IR is linked; no reader compares them): the database's names are the identity.
    """
    sources = [folder / Path(manifest.get(side, f"{side}.mneme")).name for side in ("prologue", "epilogue")]
    for source in sources:
        if not source.is_file():
            raise FormatError(
                source,
                "the recorder's snapshot of this launch is missing; the recording is damaged "
                "(or was finalized already), record again",
            )
    expected = sorted((int(a), int(n)) for a, n in manifest["regions"])
    with Snapshot.open(sources[0]) as prologue:
        found = sorted((r.addr, r.size) for r in prologue.regions)
        if found != expected:
            raise FormatError(
                sources[0],
                f"holds regions {found}; the manifest lists {expected}; the recording is damaged, record again",
                field="regions",
            )
        for region in prologue.regions:
            if region.policy != policies.get(region.addr, EXACT):
                raise FormatError(
                    sources[0],
                    f"region 0x{region.addr:x} has policy {region.policy}; the manifest "
                    f"says {policies.get(region.addr, EXACT)}",
                    field="policies",
                )
        with Snapshot.open(sources[1], base=prologue) as epilogue:  # the epilogue's base id names this prologue
            if sorted((r.addr, r.size) for r in epilogue.regions) != expected:
                raise FormatError(
                    sources[1], f"its regions differ from the manifest's {expected}; record again", field="regions"
                )
    for source, target in zip(sources, (prologue_path, epilogue_path)):
        _move(source, target)


def _move(source: Path, target: Path) -> None:
    """Rename `source` over `target`; across file systems, copy to a temporary name, rename, then remove."""
    try:
        os.replace(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise MnemeError(f"cannot move {source} to {target}: {exc.strerror}") from exc
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MnemeError(f"cannot copy {source} to {target}: {exc.strerror}") from exc
    source.unlink()


def _defines(path: Path, kernel: str) -> bool:
    """Whether an IR file defines `kernel` (a cheap text check for .ll; bitcode is assumed to)."""
    path = Path(path)
    if path.suffix != ".ll":
        return True
    text = path.read_text(errors="replace")
    return f"@{kernel}(" in text and "define" in text


def loaded_elf_files(raw_dir: Path) -> list[str]:
    """The ELF files the recorded processes had mapped (from the recorder's maps-<pid>.txt)."""
    files: list[str] = []
    for path in sorted(Path(raw_dir).glob("maps-*.txt")):
        for name in elf_files_from_maps(path.read_text(errors="replace")):
            if name not in files:
                files.append(name)
    return files


def _resolve_ir(
    kernel: str, ir_files: Sequence[Path], out: Path, arch: str, elf_files: Sequence[str], image: bytes | None
) -> tuple[list[Path], str]:
    """IR files for `kernel` inside `out`: from --ir files that define it, else the IR-source plugins."""
    sources = [p for p in ir_files if _defines(p, kernel)]
    if sources:
        stored = []
        for source in sources:
            target = out / "ir" / Path(source).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            stored.append(target)
        return stored, "--ir"
    try:
        found = resolve(kernel, arch=arch or None, elf_files=elf_files, image=image)
    except (MnemeError, OSError) as exc:  # ArchitectureMismatch, an unreadable file: binary only, said once
        log.warning("kernel %s: looking for its IR failed: %s; recorded without IR", kernel, exc)
        return [], ""
    if not found:
        return [], ""
    source_name, ir_modules = found
    stored = []
    for index, module in enumerate(ir_modules):
        digest = hashlib.sha256(module.data).hexdigest()[:16]
        target = out / "ir" / f"{digest}{module.suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(module.data)
        stored.append(target)
    return stored, source_name


def _with_application_numerics(kernel: str, stored: list[Path], numerics, out: Path) -> list[Path]:
    """The stored IR modules rewritten to compile with the application's floating-point behaviour.

    `numerics`: (description, rewrite) from the backend's reading of the recorded code image, or None.
    The rewritten modules are stored beside the others (`<hash>.numerics.bc`); a module the rewrite
    breaks stays as it was, with a warning.
    """
    if numerics is None:
        return stored
    description, rewrite = numerics
    result = []
    for path in stored:
        try:
            module = irmod.load(path)
            try:
                text = rewrite(str(module))
            finally:
                module.close()
            rewritten = irmod.reparse(text, f"{path.name} with the application's numerics")
            try:
                bitcode = rewritten.as_bitcode()
            finally:
                rewritten.close()
        except MnemeError as exc:
            log.warning(
                "kernel %s: %s cannot take the application's numerics (%s): %s; kept as it was",
                kernel,
                path.name,
                description,
                exc,
            )
            result.append(path)
            continue
        target = out / "ir" / f"{hashlib.sha256(bitcode).hexdigest()[:16]}.numerics.bc"
        if not target.exists():
            atomic_write(target, bitcode)
        result.append(target)
    log.info("kernel %s: its IR compiles with the application's floating-point behaviour (%s)", kernel, description)
    return result


def print_summary(fmt: RawFormat, raw: Path, written: Sequence[Path]) -> None:
    """The final table of `mneme record`: kernels, instances, occurrences, IR, bytes."""
    table = Table(title=f"recorded {len(launches(fmt, raw))} launches")
    for column in ("kernel", "instances", "launches", "code", "globals", "bytes", "database"):
        table.add_column(column)
    for path in written:
        rec = RecordedExecution.from_json(path)
        size = sum(f.stat().st_size for f in rec.referenced_files() if f.exists())
        occ = sum(i.occ for i in rec.kernel_instances.values())
        code = "IR" if rec.llvm_files else "binary only"
        if rec.binary_blobs:
            code += " + " + ", ".join(sorted({image.kind for image in rec.binary_blobs}))
        table.add_row(
            rec.demangled_name or rec.kernel_name,
            str(len(rec.kernel_instances)),
            str(occ),
            code,
            str(len(rec.globals)),
            f"{size:,}",
            path.name,
        )
    console = current(err=True)
    console.print(table)
    for kernel, n in sorted(in_application(fmt, raw)[1].items()):
        console.print(
            f"{kernel}: {n} launch{'es' if n != 1 else ''} inside {fmt.graphs} not recorded "
            f"(run the application without {fmt.graphs} to record them)"
        )
    for line in unrecorded_warnings(fmt, raw, written):
        log.warning("%s", line)


def unrecorded_warnings(fmt: RawFormat, raw: Path, written: Sequence[Path] = ()) -> list[str]:
    """Why kernels that ran were not recorded: one line per kernel, and one for launches left incomplete.

    The program exits as it did, and `mneme record` with it; these lines are what tells the user that
    the empty table is not the program's doing (issue: a benchmark recorded with 0 launches).
    """
    lines = []
    missing = unrecorded(fmt, raw)
    for entry in missing:
        why = "; ".join(f"{n} {reason}" for reason, n in sorted(entry.reasons.items(), key=lambda kv: -kv[1]))
        ran = f"{entry.launches} launch{'es' if entry.launches != 1 else ''}"
        if entry.graph_launches:
            ran += f" and {entry.graph_launches} inside {fmt.graphs}"
        lines.append(
            f"kernel {entry.kernel} ran ({ran}) but no launch of it was recorded"
            + (f": {why}" if why else " (the recorder gave no reason: see its messages above)")
        )
    tmp = incomplete_launches(raw)
    if tmp:
        lines.append(
            f"{len(tmp)} recorded launch{'es were' if len(tmp) != 1 else ' was'} never completed "
            f"({', '.join(p.name for p in tmp[:3])}{', ...' if len(tmp) > 3 else ''} in {raw}): the "
            "process ended before the recorder had written them (killed, _exit, or a device reset "
            "the recorder did not see)"
        )
    if missing and not written:
        lines.append(
            f"the program ran kernels but nothing was recorded; {raw} keeps what the recorder wrote "
            "(counts, code images) for a look"
        )
    return lines
