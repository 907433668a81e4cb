"""CLI conventions (issue 27, point 4): -q/-v, --json, exit codes, no wrapping into pipes,
the user's umask, one registry of MNEME_* variables, no stale commands in the docs."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mneme.core import envvars, fsutil
from mneme.core.cli import cli
from mneme.core.errors import UsageError
from mneme.core.snapshot import SnapshotWriter
from paths import ROOT

A = 0x7000_0000


def run(*args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def snapshot(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with SnapshotWriter(path, "prologue", static_hash="abc", dynamic_hash="def") as w:
        w.set_args(b"\x00" * 8, [(0, 8)])
        w.add_region(A, np.arange(5000, dtype=np.float32), encoding="zstd")
    return path


def mneme(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from mneme.core.cli import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


# -- -q / -v and third-party logs ---------------------------------------------------------------


def _study_stderr(verbosity: int, tmp_path: Path) -> str:
    code = (
        "import sys; from mneme.core import logs; logs.configure(int(sys.argv[1]))\n"
        "from mneme.core.tuning.store import ResultStore\n"
        "ResultStore.create_or_load('journal:' + sys.argv[2], 'k')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(verbosity), str(tmp_path / f"j{verbosity}.log")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_optunas_study_created_line_shows_only_with_verbose(tmp_path):
    assert "A new study created" not in _study_stderr(0, tmp_path)
    assert "A new study created" not in _study_stderr(-1, tmp_path)
    assert "A new study created" in _study_stderr(1, tmp_path)


def test_quiet_and_verbose_are_group_options_and_exclusive():
    assert run("-q", "config", "--json").exit_code == 0
    assert run("-vv", "config", "--json").exit_code == 0
    result = run("-q", "-v", "config")
    assert result.exit_code == 2 and "cannot be combined" in result.output


def test_quiet_silences_warnings_but_not_errors(tmp_path):
    import logging

    from mneme.core import logs

    logs.configure(-1)
    try:
        assert not logging.getLogger("mneme").isEnabledFor(logging.WARNING)
        assert logging.getLogger("mneme").isEnabledFor(logging.ERROR)
        logs.configure(1)
        assert logging.getLogger("mneme").isEnabledFor(logging.INFO)
        assert logging.getLogger("optuna").isEnabledFor(logging.INFO)
    finally:
        logs.configure(0)


# -- --json on every command that reports -------------------------------------------------------


def test_plugins_json_lists_backends_and_parameters():
    rows = json.loads(run("plugins", "--json").output)
    assert {"kind", "name", "plugin", "distribution", "version", "status"} <= set(rows[0])
    assert any(r["kind"] == "backend" and r["name"] == "host" for r in rows)
    knobs = json.loads(run("plugins", "--parameters", "--json").output)
    assert any(k["parameter"] == "max_registers" and k["type"] == "int" for k in knobs)


def test_snapshot_info_and_verify_json(tmp_path):
    path = snapshot(tmp_path / "p.mneme")
    info = json.loads(run("snapshot", "info", "--json", path).output)
    assert info["kind"] == "prologue" and info["regions"][0]["address"] == A and info["regions"][0]["size"] == 20000
    checked = json.loads(run("snapshot", "verify", "--json", path).output)
    assert checked == [{"path": str(path), "ok": True, "regions": 1, "size": 20000}]


def test_cuda_info_json():
    pytest.importorskip("mneme_cuda")
    report = json.loads(run("cuda", "info", "--json").output)
    assert set(report) >= {"usable", "reason", "fingerprint", "recorder"}


# -- exit codes ---------------------------------------------------------------------------------


def test_a_corrupt_snapshot_does_not_verify_and_a_malformed_one_is_invalid_input(tmp_path):
    good = snapshot(tmp_path / "p.mneme")
    data = bytearray(good.read_bytes())
    data[-60] ^= 1
    bad = tmp_path / "bad.mneme"
    bad.write_bytes(bytes(data))
    assert run("snapshot", "verify", bad).exit_code == 3
    junk = tmp_path / "junk.mneme"
    junk.write_bytes(b"not a snapshot at all" * 10)
    result = run("snapshot", "info", junk)
    assert result.exit_code == 2 and "junk.mneme" in result.output


def test_an_unknown_architecture_is_refused_by_name_with_no_llvm_warnings(tmp_path):
    from irbuild import build_cuda_ir, cuda_available

    if not cuda_available()[0]:
        pytest.skip(cuda_available()[1])
    proc = mneme(
        "ir", "compile", str(build_cuda_ir("saxpy")), "--arch", "sm_999", "--emit", "ptx", "-o", str(tmp_path / "k.ptx")
    )
    assert proc.returncode == 2, proc.stderr
    assert "unknown architecture 'sm_999'" in proc.stderr
    assert "not a recognized processor" not in proc.stderr


def test_recognized_asks_llvm():
    from mneme.core import llvm_cpus

    assert llvm_cpus.recognized("nvptx64-nvidia-cuda", "sm_90")
    assert not llvm_cpus.recognized("nvptx64-nvidia-cuda", "sm_999")
    assert llvm_cpus.recognized("amdgcn-amd-amdhsa", "gfx90a")
    assert not llvm_cpus.recognized("amdgcn-amd-amdhsa", "gfx999")


def test_every_command_says_its_exit_codes_in_its_help():
    from mneme.core import plugins

    missing = []
    for name, command in sorted((p.name, p.obj) for p in plugins.provided("command")):
        import click

        subs = command.commands.items() if isinstance(command, click.Group) else [("", command)]
        for sub, cmd in subs:
            text = run(*([name, sub] if sub else [name]), "--help").output
            if "Exit codes" not in " ".join(text.split()):
                missing.append(f"{name} {sub}".strip())
    assert not missing, f"--help does not state the exit codes: {missing}"


def test_the_exit_code_table_in_docs_matches_errors():
    from mneme.core import errors

    text = (ROOT / "docs" / "cli.md").read_text()
    for code in (
        errors.EXIT_OK,
        errors.EXIT_INTERNAL,
        errors.EXIT_INVALID_INPUT,
        errors.EXIT_NOT_VERIFIED,
        errors.EXIT_INTERRUPTED,
        143,
    ):
        assert re.search(rf"^\| *{code} *\|", text, re.M), code
    assert "docs/cli.md" in (ROOT / "README.md").read_text()


# -- output never wrapped into a pipe -----------------------------------------------------------


def test_piped_output_keeps_long_paths_on_one_line(tmp_path):
    path = snapshot(tmp_path / ("a_rather_long_folder_name_" * 4) / ("and_another_one_" * 4) / "p.mneme")
    proc = mneme("snapshot", "verify", str(path))
    assert proc.returncode == 0, proc.stderr
    assert f"{path}: ok" in proc.stdout.splitlines()[0]


def test_piped_tables_keep_each_row_on_one_line():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    code = "import sys; from mneme.core.cli import main; main(sys.argv[1:])"
    proc = subprocess.run(
        [sys.executable, "-c", code, "config"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "MNEME_LIMIT_WORKER_DATA_BYTES" in line)
    assert envvars.registry()["MNEME_LIMIT_WORKER_DATA_BYTES"].help in row


# -- files written with the user's umask --------------------------------------------------------


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomic_writes_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        fsutil.atomic_write(tmp_path / "best.json", "{}")
        from mneme.core.tuning.report import write_json

        write_json(tmp_path / "summary.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "best.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == mode


def test_rewriting_a_file_keeps_its_mode(tmp_path):
    target = tmp_path / "x.json"
    target.write_text("{}")
    target.chmod(0o640)
    fsutil.atomic_write(target, "[]")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_text() == "[]"


# -- one registry of environment variables ------------------------------------------------------

_SOURCES = ("*.py", "*.c", "*.cpp", "*.h", "*.cu", "*.inc")


def test_every_mneme_variable_in_the_sources_is_registered():
    found = set()
    for folder in (ROOT / "mneme", ROOT / "backends"):
        for pattern in _SOURCES:
            for path in folder.rglob(pattern):
                found |= set(re.findall(r"\bMNEME_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    found -= envvars.NOT_VARIABLES
    found.discard("MNEME_LIMIT")  # the prefix of the limits, documented in mneme.core.limits
    found.discard("MNEME_RECORD")
    import mneme.core.backend  # noqa: F401 - registers the backends' variables

    missing = sorted(found - set(envvars.registry()))
    assert not missing, f"read but not registered in mneme/core/envvars.py: {missing}"
    assert len(envvars.registry()) >= 40


def _environ_reads(tree: ast.AST) -> list[tuple[int, ast.expr | None]]:
    """(line, key) of every read of the environment: os.environ.get(K), os.environ[K], os.getenv(K),
    K in os.environ; a key of None is a read of the whole mapping other than a copy (iteration)."""

    def is_environ(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and is_environ(func.value):
                reads.append((node.lineno, node.args[0]))
            elif (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv"
            ):
                reads.append((node.lineno, node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            reads.append((node.lineno, node.slice))
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(is_environ(c) for c in node.comparators)
        ):
            reads.append((node.lineno, node.left))
        elif isinstance(node, (ast.For, ast.comprehension)) and is_environ(node.iter):
            reads.append((node.lineno if hasattr(node, "lineno") else node.iter.lineno, None))
    return reads


def _string_values(tree: ast.AST) -> dict[str, set[str]]:
    """Name -> the strings a module assigns it (NAME = "...", for NAME in ("...", ...)), wherever it does."""
    values: dict[str, set[str]] = {}

    def strings(node) -> set[str] | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) for e in node.elts):
            return {str(e.value) for e in node.elts}
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found = strings(node.value) if isinstance(node.value, ast.Constant) else None
            if found is not None:
                values.setdefault(node.targets[0].id, set()).update(found)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            found = strings(node.iter)
            if found is not None:
                values.setdefault(node.target.id, set()).update(found)
    return values


def environ_violations(path: Path) -> list[str]:
    """Reads of MNEME_* variables that bypass mneme.core.envvars, and reads whose key is not a known name."""
    tree = ast.parse(path.read_text(), str(path))
    values = _string_values(tree)
    found = []
    for line, key in _environ_reads(tree):
        if key is None:
            names = None
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            names = {key.value}
        elif isinstance(key, ast.Name) and key.id in values:
            names = values[key.id]
        else:
            names = None
        if names is None or any(n.startswith("MNEME_") for n in names):
            found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}")
    return found


def test_python_reads_mneme_variables_only_through_the_registry():
    sources = [
        p
        for folder in (ROOT / "mneme", *sorted((ROOT / "backends").glob("*/mneme_*")))
        for p in folder.rglob("*.py")
        if p.name != "envvars.py"
    ]
    assert len(sources) > 100
    violations = [v for path in sources for v in environ_violations(path)]
    assert not violations, (
        "read MNEME_* variables through mneme.core.envvars.get/get_int (typed, with the "
        f"registry's default), not os.environ: {violations}"
    )


def test_the_environ_check_finds_each_kind_of_direct_read(tmp_path):
    path = tmp_path / "probe.py"
    cases = {
        'os.environ.get("MNEME_CACHE_DIR")': 1,
        'os.environ["MNEME_LLD"]': 1,
        'os.getenv("MNEME_LLD", "x")': 1,
        '"MNEME_LLD" in os.environ': 1,
        'NAME = "MNEME_LLD"\nos.environ.get(NAME)': 1,
        "os.environ.get(self.env)": 1,
        "[k for k in os.environ]": 1,
        'os.environ.get("CUDA_PATH")': 0,
        'os.environ["MNEME_LLD"] = "x"': 0,
        'dict(os.environ, MNEME_LLD="x")': 0,
        'for env in ("CUDA_HOME", "CUDA_PATH"):\n    os.environ.get(env)': 0,
    }
    for text, expected in cases.items():
        path.write_text("import os\n" + text + "\n")
        assert len(environ_violations(path)) == expected, text


def test_registry_reads_are_typed_with_the_registered_default(monkeypatch):
    monkeypatch.delenv("MNEME_HOST_DEVICES", raising=False)
    assert envvars.get("MNEME_HOST_DEVICES") == "1" and envvars.get_int("MNEME_HOST_DEVICES") == 1
    monkeypatch.setenv("MNEME_HOST_DEVICES", " 3 ")
    assert envvars.get_int("MNEME_HOST_DEVICES") == 3
    monkeypatch.setenv("MNEME_CACHE_MAX_BYTES", "lots")
    with pytest.raises(UsageError, match="MNEME_CACHE_MAX_BYTES='lots' is not an integer"):
        envvars.get_int("MNEME_CACHE_MAX_BYTES")
    monkeypatch.delenv("MNEME_CUPTI_LIB", raising=False)
    assert envvars.get("MNEME_CUPTI_LIB") is None and envvars.raw("MNEME_CUPTI_LIB") is None
    with pytest.raises(KeyError, match="not registered"):
        envvars.get("MNEME_NOT_A_VARIABLE")


def test_config_lists_the_registry_and_names_a_misspelt_variable():
    result = run("config", "--json", env={"MNEME_CACHE_DIRR": "/x"})
    environment = json.loads(result.output)["environment"]
    assert set(envvars.registry()) <= set(environment)
    assert all(environment[name]["meaning"] for name in envvars.registry())
    assert "did you mean MNEME_CACHE_DIR" in environment["MNEME_CACHE_DIRR"]["meaning"]


# -- the docs name only commands that exist -----------------------------------------------------


def _doc_commands() -> list[tuple[str, str, str]]:
    found = []
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("README.md")]
    for path in files:
        text = path.read_text()
        code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`[^`\n]+`", text)
        for block in code:
            for line in block.splitlines():
                if re.search(r"\b(from|import) mneme\b", line):
                    continue
                for m in re.finditer(r"(?<![\w./-])mneme ([a-z][a-z-]*)(?: +([a-z][a-z-]*))?", line):
                    found.append((str(path.relative_to(ROOT)), m.group(1), m.group(2) or ""))
    return found


def test_the_docs_name_only_commands_that_exist():
    import click

    ctx = click.Context(cli)
    stale = []
    for where, name, sub in _doc_commands():
        command = cli.get_command(ctx, name)
        if command is None:
            stale.append(f"{where}: mneme {name}")
        elif isinstance(command, click.Group) and sub and command.get_command(ctx, sub) is None:
            stale.append(f"{where}: mneme {name} {sub}")
    assert not stale, stale
    assert any(name == "ir" and sub == "list" for _, name, sub in _doc_commands())


# -- unknown keys in YAML/JSON inputs ------------------------------------------------------------


def _spec(tmp_path: Path, text: str) -> Path:
    (tmp_path / "saxpy.ll").write_text((ROOT / "examples" / "saxpy" / "saxpy.ll").read_text())
    path = tmp_path / "capture.yaml"
    path.write_text("ir: saxpy.ll\nkernel: saxpy\n" + text)
    return path


@pytest.mark.parametrize(
    "extra,message",
    [
        ("blok: [256]\n", "unknown key 'blok'; did you mean 'block'?"),
        ("shared_memory: 0\n", "unknown key 'shared_memory'; did you mean 'shared_mem'?"),
        ("global: {g: 1}\n", "unknown key 'global'; did you mean 'globals'?"),
    ],
)
def test_a_capture_spec_with_an_unknown_key_is_refused_by_name(tmp_path, extra, message):
    spec = _spec(
        tmp_path, "grid: [1]\nblock: [32]\nargs: [32, 2.0, {zeros: {shape: [32]}}, {zeros: {shape: [32]}}]\n" + extra
    )
    result = run("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert result.exit_code == 2 and message in result.output, result.output


def test_unknown_keys_inside_capture_arguments_are_refused(tmp_path):
    spec = _spec(
        tmp_path,
        "grid: [1]\nblock: [32]\nargs: [32, 2.0, {zeros: {shape: [32], sead: 1}}, {nmae: y, zeros: {shape: [32]}}]\n",
    )
    result = run("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert result.exit_code == 2 and "args[2].zeros" in result.output and "'sead'" in result.output


def test_a_capture_spec_missing_grid_is_invalid_input(tmp_path):
    spec = _spec(tmp_path, "block: [32]\nargs: [32]\n")
    result = run("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert result.exit_code == 2 and "grid" in result.output


def test_a_space_parameter_with_a_misspelt_key_is_refused():
    from mneme.core.errors import FormatError
    from mneme.core.tuning.space import param_from_spec

    with pytest.raises(FormatError, match="unknown key 'stpe'; did you mean 'step'"):
        param_from_spec("block_x", {"low": 32, "high": 256, "stpe": 32}, source="s.yaml")
    with pytest.raises(FormatError, match="did you mean 'choices'"):
        param_from_spec("block_x", {"choice": [32, 64]}, source="s.yaml")
    with pytest.raises(FormatError, match="unknown key 'high'"):
        param_from_spec("block_x", {"choices": [32, 64], "high": 3}, source="s.yaml")


def test_sampler_and_space_options_are_checked_by_name():
    from mneme.core.errors import UsageError
    from mneme.core.tuning.samplers import create_sampler

    with pytest.raises(UsageError, match="takes no options"):
        create_sampler("random", options={"sead": 1})
    from mneme.plugins.spaces.builtin import StandardSpace

    with pytest.raises(UsageError, match="did you mean 'max_threads'"):
        StandardSpace(None, None, max_thread=128)


# -- a real tuning run: no library chatter, results readable by the team -------------------------


def test_tune_prints_no_optuna_lines_unless_verbose_and_writes_results_with_the_umask(tmp_path):
    from tuning_sessions import capture_saxpy

    db = capture_saxpy(tmp_path / "saxpy")
    space = ["--space", "quick", "-o", "axes=x", "--retime-top", "1", "--retime-repeats", "1", "--trials", "4"]

    def tune(*flags: str, results: Path) -> subprocess.CompletedProcess:
        code = "import os, sys; os.umask(0o002); from mneme.core.cli import main; main(sys.argv[1:])"
        return subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                *flags,
                "tune",
                "-rdb",
                str(db),
                "--sampler",
                "optuna:cmaes",
                "--seed",
                "1",
                "--results",
                str(results),
                *space,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )

    quiet = tune("-q", results=tmp_path / "q")
    assert quiet.returncode == 0, quiet.stderr
    assert "A new study created" not in quiet.stderr and "cmaes" not in quiet.stderr.lower(), quiet.stderr
    assert "best configurations" in quiet.stdout
    for name in ("best.json", "summary.json", "tuned-kernels.json"):
        assert (tmp_path / "q" / name).stat().st_mode & 0o777 == 0o664, name
    verbose = tune("-v", results=tmp_path / "v")
    assert verbose.returncode == 0, verbose.stderr
    # -v lets the library's own lines through (the results folder's study.db is written without Optuna, so its
    # "A new study created" line is gone; CMA-ES's note on the categorical axis is Optuna's sampler speaking).
    assert "sampled independently" in verbose.stderr, verbose.stderr


def test_a_sweep_file_with_an_unknown_key_is_refused(tmp_path):
    from mneme.core.errors import UsageError
    from mneme.core.tuning.sweep import Sweep

    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"schema": 1, "space": "quick", "pionts": {}}))
    with pytest.raises(UsageError, match="unknown key 'pionts'; did you mean 'points'"):
        Sweep.load(path)
