"""The decision and pipeline hooks, called through pluggy: who builds for an architecture, and the transform
pipeline ordered with tryfirst/trylast and wrappers around the core's named transforms."""

from __future__ import annotations

from pathlib import Path

import pytest

from mneme.core import build, ir, ircache, plugins
from mneme.core.backend import backend_for_arch
from mneme.core.errors import PluginError, UsageError
from mneme.core.hookspecs import hookimpl
from mneme.core.types import ExperimentConfiguration

SAXPY = Path(__file__).resolve().parents[2] / "examples" / "saxpy" / "saxpy.ll"
CONFIG = ExperimentConfiguration(grid=(64, 1, 1), block=(128, 1, 1), specialize_dims=True)


@pytest.fixture
def registered():
    yield lambda plugin, name: plugins.register(plugin, name=name)
    plugins.reset()


class Chooser:
    """Builds for the made-up architecture "emu90" with the CUDA backend, and says nothing of others."""

    @hookimpl
    def mneme_backend_for_arch(self, arch, backends):
        return backends["cuda"]() if arch == "emu90" else None


def test_a_plugin_decides_the_backend_of_an_architecture_no_backend_claims(registered):
    with pytest.raises(UsageError, match="unknown architecture 'emu90'"):
        backend_for_arch("emu90")
    registered(Chooser(), "chooser")
    assert backend_for_arch("emu90").name == "cuda"
    assert backend_for_arch("gfx90a").name == "hip"  # its None leaves the others to the core's choice


def test_a_backend_choice_that_is_not_a_backend_names_the_hook(registered):
    class Wrong:
        @hookimpl
        def mneme_backend_for_arch(self, arch, backends):
            return "cuda"

    registered(Wrong(), "wrong")
    with pytest.raises(PluginError, match="mneme_backend_for_arch returned 'cuda'"):
        backend_for_arch("sm_90")


class Early:
    """A step before the named transforms: marks the module with a global."""

    def __init__(self, seen: list):
        self.seen = seen

    @hookimpl(tryfirst=True)
    def mneme_transform_module(self, build):
        build.replace(ir.load(str(build.module) + "\n@early_marker = global i32 7\n"), "early")
        self.seen.append(("early", list(build.applied), True))


class Late:
    """A step after them: sees what ran before it."""

    def __init__(self, seen: list):
        self.seen = seen

    @hookimpl(trylast=True)
    def mneme_transform_module(self, build):
        self.seen.append(("late", list(build.applied), "@early_marker" in str(build.module)))
        build.changed("late")


class Around:
    """A wrapper around the whole pipeline."""

    def __init__(self, seen: list):
        self.seen = seen

    @hookimpl(wrapper=True)
    def mneme_transform_module(self, build):
        self.seen.append(("around", list(build.applied), "@early_marker" in str(build.module)))
        yield
        self.seen.append(("after", list(build.applied), "@early_marker" in str(build.module)))


def test_pipeline_steps_run_before_after_and_around_the_named_transforms(registered):
    module = ir.load(SAXPY.read_text())
    plain = build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=False)
    seen: list = []
    registered(Early(seen), "early-step")
    registered(Late(seen), "late-step")
    registered(Around(seen), "around-step")
    stepped = build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=False)
    assert [step[0] for step in seen] == ["around", "early", "late", "after"]
    assert seen[0][1:] == ([], False) and seen[1][1] == ["early"]  # first: before the core's named transforms
    assert seen[2][1][0] == "early" and "specialize_dims" in seen[2][1] and seen[2][2]  # after them, on its module
    assert seen[3][1][-1] == "late" and seen[3][2]
    assert b"early_marker" in stepped.data and b"early_marker" not in plain.data
    assert stepped.variant_hash != plain.variant_hash


def test_a_pipeline_plugin_keys_the_build_cache(registered):
    module = ir.load(SAXPY.read_text())
    cache = ircache.BuildCache(memory_entries=16, disk=False)
    plain = build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=cache)
    assert build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=cache).stage_times.keys() == {"cache"}
    registered(Early([]), "early-step")
    stepped = build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=cache)
    assert b"early_marker" in stepped.data and b"early_marker" not in plain.data  # not served from the cache
    assert build.compile(module, "saxpy", CONFIG, "sm_90", emit="ptx", cache=cache).stage_times.keys() == {"cache"}


def test_trace_plugins_prints_every_hook_call_with_its_results(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "MNEME_CACHE_DIR": str(tmp_path)}  # no command index yet: every plugin's hooks run
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "--trace-plugins", "plugins"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    traced = proc.stderr
    for hook in ("mneme_backends", "mneme_samplers", "mneme_transforms", "mneme_cli_commands"):
        assert f"{hook} [hook]" in traced and f"finish {hook} -->" in traced
    assert "Described(name='tpe'" not in traced and "Described(name='exhaustive'" in traced
