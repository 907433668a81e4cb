"""bench_app_corpus.py's diagnosis of an instance whose replay misses the recorded launch's time by more than 5%:
the replay timed again with its method changed one way at a time, and in fresh processes (also mapping the
recorded ranges at the driver's recommended granularity). Run by bench_app_corpus.py, not alone."""

from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("bench_app_corpus")


def diagnose(db: Path, dynamic_hash: str, mode: str, iterations: int) -> dict[str, float]:
    """Median replay seconds with the timing method changed one way at a time (for an instance that misses 5%).

    `flushed`: as `mneme replay` times (reset of the written regions, L2 flush, synchronize, launch), in a
    new executor (another process-level draw than the first replay's); `unsynced`: the launch queued right
    behind the flush (the replay's method before it synchronized, as the recorder does); `new-mapping`: a
    fresh buffer of the flush's size allocated right before the timed runs (as the replay's flush buffer was,
    before it was allocated ahead of the restore); `no-reset`: the flush without the reset; `prologue-copy`:
    reset, every recorded region read by the copy engine (as the recorder's prologue capture reads them right
    before), flush; `events`: flushed, by CUDA events; `warm`, `primed`: the other cache states; `library`:
    flushed, the binary loaded as the CUDA runtime loads an application's code (`cuLibraryLoadData`, the kernel's
    function taken for this context) instead of the replay's `cuModuleLoadData`.
    """
    from mneme.core.executor import BaseExecutor

    out: dict[str, float] = {}
    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode=mode) as ex:
        config = ex.default_config()
        result = ex.execute(config)
        if not result.executed:
            return out
        # The kernel execute() loaded (cached by its binary): a bench's look inside, not an API.
        kernel = ex._load(ex.build(config), result, config)
        device = ex.device

        def reset_and_flush() -> None:  # the launch queued right behind the flush, no synchronize between
            ex.reset()
            device.flush_l2()

        regions = [(r.addr, r.size) for r in ex.prologue.regions]
        scratch = device.alloc(max([size for _, size in regions] + [1]))

        def read_all_then_flush() -> None:  # as the recorder's prologue capture: every region read by the copier
            ex.reset()
            for addr, size in regions:
                device.copy(scratch.addr, addr, size)

        def through_sms(work) -> None:
            device.copy_through = "sm"
            try:
                work()
            finally:
                device.copy_through = "engine"

        def sm_rewrite() -> None:  # every region last written by the SMs, as the application's kernels leave it
            ex.reset()
            through_sms(lambda: [device.copy(addr, addr, size) for addr, size in regions])

        def sm_read() -> None:  # every region read by the SMs after the reset
            ex.reset()
            through_sms(lambda: [device.copy(scratch.addr, addr, size) for addr, size in regions])

        def flush_then_touch_pages() -> None:  # translations warm, the L2 all but cold (16 B per 64 KiB)
            ex.reset()
            device.flush_l2()
            through_sms(
                lambda: [
                    device.copy(scratch.addr, a, 16)
                    for addr, size in regions
                    for a in range(addr, addr + size, 1 << 16)
                ]
            )
            device.synchronize()

        variants = {
            "sm-rewrite": (sm_rewrite, "flushed", "auto"),
            "sm-read": (sm_read, "flushed", "auto"),
            "touch-pages": (flush_then_touch_pages, "warm", "auto"),
            "flushed": (ex.reset, "flushed", "auto"),
            "unsynced": (reset_and_flush, "warm", "auto"),
            "new-mapping": (ex.reset, "flushed", "auto"),
            "no-reset": (None, "flushed", "auto"),
            "prologue-copy": (read_all_then_flush, "flushed", "auto"),
            "events": (ex.reset, "flushed", "events"),
            "warm": (ex.reset, "warm", "auto"),
            "primed": (ex.reset, "primed", "auto"),
        }
        try:
            library = library_kernel(device, kernel)
        except Exception as exc:  # noqa: BLE001 - the other variants still run
            log.warning("diagnosis library of %s: %s", dynamic_hash, exc)
            library = None
        if library is not None:
            variants["library"] = (ex.reset, "flushed", "auto")
        try:
            for name, (before, cache, timer) in variants.items():
                ex.reset()
                fresh = device.alloc(device.flush_bytes) if name == "new-mapping" else None
                try:
                    times = device.time(
                        library if name == "library" else kernel,
                        config.grid,
                        config.block,
                        config.shared_mem,
                        ex.args,
                        iterations,
                        before_each=before,
                        cache=cache,
                        timer=timer,
                    )
                except Exception as exc:  # noqa: BLE001 - one variant's failure leaves the others' figures
                    log.warning("diagnosis %s of %s: %s", name, dynamic_hash, exc)
                    continue
                finally:
                    if fresh is not None:
                        device.synchronize()
                        device.free(fresh)
                out[name] = statistics.median(times)
        finally:
            device.synchronize()
            device.free(scratch)
            if library is not None:
                library.unload()
    out.update(fresh_processes(db, dynamic_hash, mode, iterations))
    # The replay's kernel timer matching its records by correlation tags (which also turn on the driver API's
    # records), its default before the fourth session's measurement, instead of by time window as the recorder.
    out.update(
        fresh_processes(db, dynamic_hash, mode, iterations, name="fresh-tags", env={"MNEME_CUPTI_MATCH": "tags"})
    )
    # Every recorded range read, or rewritten, through the SMs before each flush, as the replay does on request.
    for how in ("read", "rewrite"):
        out.update(
            fresh_processes(
                db, dynamic_hash, mode, iterations, name=f"fresh-{how}", env={"MNEME_CUDA_BEFORE_FLUSH": how}
            )
        )
    # The recorded ranges mapped at the driver's recommended granularity, not the minimum the recorder maps
    # the application's allocations at (compare with fresh-processes: both are fresh processes). Where the two
    # granularities are equal it would map exactly as fresh-processes did: not run (the row shows both sizes).
    sizes = map_granularities()
    if sizes.get("recommended") != sizes.get("minimum"):
        out.update(
            fresh_processes(
                db,
                dynamic_hash,
                mode,
                iterations,
                name="fresh-recommended",
                env={"MNEME_CUDA_MAP_GRANULARITY": "recommended"},
            )
        )
    return out


def library_kernel(device, kernel):
    """`kernel`'s binary loaded as the CUDA runtime loads an application's code: a library (`cuLibraryLoadData`),
    its kernel's function for the current context; a kernel object the device can time (unload() when done)."""
    from mneme_cuda.driver import check, driver
    from mneme_cuda.kernel import CudaKernel

    cu = driver()
    device._enter()
    library = check(cu.cuLibraryLoadData(kernel.binary.data, None, None, 0, None, None, 0), "cuLibraryLoadData")
    try:
        handle = check(cu.cuLibraryGetKernel(library, kernel.binary.kernel_name.encode()), "cuLibraryGetKernel")
        function = check(cu.cuKernelGetFunction(handle), "cuKernelGetFunction")
        module = check(cu.cuLibraryGetModule(library), "cuLibraryGetModule")
    except Exception:
        cu.cuLibraryUnload(library)
        raise

    class LibraryKernel(CudaKernel):
        def _release(self) -> None:  # the library owns its module
            pass

        def unload(self) -> None:
            cu.cuLibraryUnload(library)

    return LibraryKernel(device, kernel.binary, module, function)


def map_granularities() -> dict[str, int]:
    """The driver's minimum and recommended allocation granularity of device 0, in bytes ({} where the query
    fails)."""
    from mneme_cuda.memory import GRANULARITIES, allocation_granularity

    from mneme.core.errors import MnemeError

    try:
        return {which: allocation_granularity(0, which) for which in GRANULARITIES}
    except MnemeError as exc:  # a figure of context: its failure must not cost the program's rows
        log.warning("the allocation granularities: %s", exc)
        return {}


def fresh_processes(
    db: Path,
    dynamic_hash: str,
    mode: str,
    iterations: int,
    processes: int = 3,
    name: str = "fresh-processes",
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """The default replay in `processes` fresh interpreters, the median of their medians (a microsecond kernel's
    time may sit on a level per process: docs/design/investigations/gpu-2026-12-04.md), as {name: seconds};
    `env`: variables set for those processes (a replay option, e.g. MNEME_CUDA_MAP_GRANULARITY)."""
    code = (
        f"import sys, pathlib; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import bench_app_corpus as b; "
        "print(b.replay(pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])).median_time)"
    )
    medians = []
    for _ in range(processes):
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, str(db), dynamic_hash, mode, str(iterations)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, **(env or {})},
            )
            medians.append(float(proc.stdout.strip().splitlines()[-1]))
        except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            log.warning("a fresh-process replay of %s: %s", dynamic_hash, exc)
    return {name: statistics.median(medians)} if medians else {}
