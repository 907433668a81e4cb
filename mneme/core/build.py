"""The one compile path: preprocess (transforms) -> the backend's compile hook, through the build cache.

Replay and tune workers (`KernelBuilder`), `mneme capture`, `mneme ir compile|resources|diff|show`
and the benchmarks all build here. The backend is the one that claims the architecture
(`Backend.claims`), or the one given (a replay's); it optimizes and generates code with its own
toolchain. The cache key is the backend's toolchain (`Backend.toolchain`), the architecture,
the output kind and the configuration's build fields (`params.build_fields()`) over the variant hash.
A backend that builds in two steps (`Backend.intermediate`) has its intermediate code cached too,
keyed without the assemble-stage fields, and only `Backend.assemble` runs for a configuration that
differs from a cached one in those alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs

from mneme.core import events, ir, ircache, pipeline
from mneme.core.backend import Backend, DeviceBinary, backend_for_arch
from mneme.core.types import ExperimentConfiguration


def compile(
    module: ir.ModuleRef,
    kernel_name: str,
    config: ExperimentConfiguration,
    arch: str,
    args: bytes | None = None,
    arg_layout: Sequence[Any] | None = None,
    *,
    backend: Backend | None = None,
    emit: str | None = None,
    target: str | None = None,
    specialize_indexes: Sequence[int] | None = None,
    extra_transforms: Sequence[str] = (),
    base_hash: str | None = None,
    cache: Any = True,
) -> DeviceBinary:
    """preprocess -> `backend.compile` with the build cache; returns a `DeviceBinary`.

    `backend`: default the installed one that claims `arch`. `emit`: one of its `emits`
    (default its first). `target`: the IR target transforms see (default the module's).
    `cache`: True for the process and disk caches (`ircache.default_cache`), False for none,
    or an `ircache.BuildCache`. The binary's `stage_times` holds each stage's seconds.
    The input module is left untouched.
    """
    start = time.perf_counter()
    backend = backend or backend_for_arch(arch)
    emit = backend.check_emit(emit, arch)
    store = ircache.default_cache() if cache is True else (cache or None)
    request = None
    toolchain = backend.toolchain(arch) if store is not None else {}
    if store is not None:
        # the request (input IR, configuration, recorded arguments) decides the build: a hit skips preprocessing
        base_hash = base_hash or ir.module_hash(module)
        request = ircache.request_key(
            base_hash,
            kernel_name,
            config,
            toolchain,
            arch,
            emit,
            args,
            arg_layout,
            specialize_indexes,
            extra_transforms,
            pipeline.pipeline_plugins(),
        )
        hit = store.get(request)
        if hit is not None:
            hit = attrs.evolve(hit, stage_times={"cache": time.perf_counter() - start})
            return _compiled(kernel_name, config, hit, cached=True)
    pre = pipeline.preprocess(
        module,
        kernel_name,
        config,
        args,
        arg_layout,
        target,
        specialize_indexes=specialize_indexes,
        extra_transforms=extra_transforms,
        base_hash=base_hash,
    )
    try:
        key = (
            ircache.build_key(pre.variant_hash, config, toolchain, arch, emit, kernel=kernel_name)
            if store is not None
            else None
        )
        if store is not None:
            hit = store.get(key)
            if hit is not None:
                store.put(request, hit, alias_of=key)
                hit = attrs.evolve(hit, stage_times={"preprocess": pre.seconds, "cache": time.perf_counter() - start})
                return _compiled(kernel_name, config, hit, cached=True)
        binary = _build(backend, pre, kernel_name, config, arch, emit, store, toolchain)
        times = {"preprocess": pre.seconds, **binary.stage_times}
        binary = attrs.evolve(binary, stage_times=times, variant_hash=pre.variant_hash)
        if store is not None:
            store.put(key, binary)
            store.put(request, binary, alias_of=key)
        return _compiled(kernel_name, config, binary, cached=False)
    finally:
        pre.module.close()


def _compiled(kernel_name: str, config: ExperimentConfiguration, binary: DeviceBinary, cached: bool) -> DeviceBinary:
    events.emit("mneme_variant_compiled", kernel_name=kernel_name, config=config, binary=binary, cached=cached)
    return binary


def _build(
    backend: Backend,
    pre: pipeline.Preprocessed,
    kernel_name: str,
    config: ExperimentConfiguration,
    arch: str,
    emit: str,
    store: Any,
    toolchain: dict[str, str],
) -> DeviceBinary:
    """`backend.compile`, or, where the backend builds this configuration in two steps
    (`Backend.intermediate`), its intermediate code from the cache (or built and kept there) and
    `backend.assemble`: configurations that differ only in assemble-stage fields share the first step."""
    step = backend.intermediate(config) if store is not None else None
    if step is None or step == emit:
        return backend.compile(pre.module, kernel_name, config, arch, emit=emit)
    key = ircache.build_key(pre.variant_hash, config, toolchain, arch, step, kernel=kernel_name, intermediate=True)
    start = time.perf_counter()
    first = store.get(key)
    if first is None:
        first = backend.compile(pre.module, kernel_name, config, arch, emit=step)
        store.put(key, first)
        times = dict(first.stage_times)
    else:
        times = {"cache": time.perf_counter() - start}
    binary = backend.assemble(first, config, arch, emit=emit)
    return attrs.evolve(binary, stage_times={**times, **binary.stage_times})
