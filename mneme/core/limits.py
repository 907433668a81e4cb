"""Limits on what an input file may ask for, checked before anything is allocated.

Recordings, captures and search spaces come from other people (docs/security.md): a
declared size or count is a claim, and each claim is checked against a named limit
before memory is allocated or work starts. A limit is raised for one run with the
environment variable ``MNEME_LIMIT_<NAME>`` (``MNEME_LIMIT_BUFFER_BYTES=34359738368``);
every error names the limit and that variable.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from mneme.core import envvars
from mneme.core.errors import FormatError, LimitError
from mneme.core.limit_defaults import DEFAULTS, variable  # apart, for the variable registry; re-exported here


def limit(name: str) -> int | float:
    """The limit `name`: from MNEME_LIMIT_<NAME> when set, else its default."""
    value = envvars.get(variable(name), "")
    if not value:
        return DEFAULTS[name]
    try:
        number = int(value, 0) if not name.endswith("_seconds") else float(value)
    except ValueError:
        raise LimitError(f"{variable(name)}={value!r} is not an integer") from None
    if not number >= 0:  # NaN included
        raise LimitError(f"{variable(name)}={value!r} must be >= 0")
    return number


def check(name: str, value: int, what: str) -> int:
    """`value` when it is within limit `name`, else a `LimitError` naming `what` and the limit."""
    bound = limit(name)
    if value > bound:
        raise LimitError(
            f"{what} is {value}, over the limit {name}={bound}; if the input is trusted, raise it "
            f"with {variable(name)}=N"
        )
    return value


def depth(data: Any, where: Any, *, bound: int | None = None) -> None:
    """Refuse a parsed document nested deeper than the json_depth limit (without recursion)."""
    bound = limit("json_depth") if bound is None else bound
    stack = [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > bound:
            raise FormatError(
                where,
                f"nested deeper than the limit json_depth={bound}; raise it with "
                f"{variable('json_depth')}=N if the file is trusted",
            )
        stack.extend((child, level + 1) for child in children)


class _Refused(ValueError):
    """A document's own mistake found while parsing (a duplicate key, a non-finite number)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {key!r} appears twice in one object; each key once")
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is not finite; sizes, addresses and values are finite numbers")
    return value


def _no_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number in Mneme's files (non-finite values are refused)")


def load_json(text: str, where: Any) -> Any:
    """`json.loads` whose failures (syntax, nesting, huge integers, duplicate keys, NaN and
    infinities) are `FormatError`s naming `where`."""
    check("text_bytes", len(text), f"{where}: the document's size")
    # Python's objects cost ~30x the text of a small value: bound the values before parsing. Each
    # value but the first follows a comma or opens a list or object (commas in strings count too).
    nodes = text.count(",") + text.count("[") + text.count("{")
    if nodes > limit("json_nodes"):
        raise LimitError(
            f"{where}: the document has about {nodes} values, over the limit json_nodes="
            f"{limit('json_nodes')}; if the input is trusted, raise it with {variable('json_nodes')}=N"
        )
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_float=_finite, parse_constant=_no_constant)
    except _Refused as exc:
        raise FormatError(where, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise FormatError(where, f"not valid JSON: {exc}") from None
    except RecursionError:  # deeper than Python's parser goes: far past the limit
        raise FormatError(
            where,
            f"nested deeper than the limit json_depth={limit('json_depth')}; raise it with "
            f"{variable('json_depth')}=N if the file is trusted",
        ) from None
    except ValueError as exc:  # integers longer than Python's digit limit
        raise FormatError(where, f"not readable JSON: {str(exc)[:200]}") from None
    depth(data, where)
    return data


def load_yaml(text: str, where: Any) -> Any:
    """YAML (or JSON) data without aliases, duplicate keys or non-finite numbers; its nodes are
    counted and its nesting bounded while it is read (json_nodes, json_depth), before the
    document is built: an alias or node bomb is an error, not gigabytes of memory."""
    import yaml

    check("text_bytes", len(text), f"{where}: the document's size")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise FormatError(where, str(exc)) from None
    except LimitError as exc:
        raise LimitError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise FormatError(where, f"not valid YAML/JSON: {str(exc)[:500]}") from None
    except RecursionError:
        raise FormatError(
            where,
            f"nested deeper than the limit json_depth={limit('json_depth')}; raise it with "
            f"{variable('json_depth')}=N if the file is trusted",
        ) from None
    except ValueError as exc:
        raise FormatError(where, f"not readable YAML: {str(exc)[:200]}") from None
    depth(data, where)
    return data


def _loader():
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (`*name`), duplicate keys and non-finite floats, and
        bounds the nodes and nesting of a document as it composes it."""

        def __init__(self, stream):
            super().__init__(stream)
            self._nodes, self._level = 0, 0
            self._max_nodes, self._max_level = limit("json_nodes"), limit("json_depth")

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed in Mneme's files", event.start_mark
                )
            self._nodes += 1
            if self._nodes > self._max_nodes:
                raise LimitError(
                    f"the document has more than {self._max_nodes} nodes (values, lists and "
                    f"mappings), over the limit json_nodes; if the input is trusted, raise it with "
                    f"{variable('json_nodes')}=N"
                )
            self._level += 1
            if self._level > self._max_level:
                raise _Refused(
                    f"nested deeper than the limit json_depth={self._max_level}; raise it with "
                    f"{variable('json_depth')}=N if the file is trusted"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self._level -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in seen:
                    raise _Refused(f"the key {key!r} appears twice in one mapping ({_line(key_node)}); each key once")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_float(self, node):
            value = super().construct_yaml_float(node)
            if not math.isfinite(value):
                raise _Refused(
                    f"the number {node.value[:40]!r} ({_line(node)}) is not finite; sizes, addresses and "
                    "values are finite numbers"
                )
            return value

    NoAliasLoader.add_constructor("tag:yaml.org,2002:float", NoAliasLoader.construct_yaml_float)
    return NoAliasLoader


def _line(node) -> str:
    """Where a YAML node is, as 'line N: <the line's text>', so the message shows its field."""
    mark = node.start_mark
    text = ""
    if mark.buffer is not None:
        start = mark.buffer.rfind("\n", 0, mark.pointer) + 1
        end = mark.buffer.find("\n", mark.pointer)
        text = mark.buffer[start : end if end >= 0 else len(mark.buffer)].strip()[:100]
    return f"line {mark.line + 1}: {text!r}" if text else f"line {mark.line + 1}"


class _LazyLoader:
    """The loader class, made on first use so importing this module does not import yaml."""

    def __init__(self):
        self._cls = None

    def __call__(self, stream):
        if self._cls is None:
            self._cls = _loader()
        return self._cls(stream)


_NoAliasLoader = _LazyLoader()


def read_text(path: os.PathLike | str, what: str = "file", *, limit_name: str = "text_bytes") -> str:
    """A regular file's UTF-8 text, refusing FIFOs, devices and files over the limit `limit_name`
    (text_bytes) before reading (a FIFO would block, /dev/zero would never end)."""
    data = read_bytes(path, what, limit_name=limit_name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"is not UTF-8 text: {exc}") from None


def read_bytes(path: os.PathLike | str, what: str = "file", *, limit_name: str = "text_bytes") -> bytes:
    """A regular file's bytes, refusing FIFOs, devices and files over the limit `limit_name` before reading."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FormatError(path, f"no such {what}") from None
    except IsADirectoryError:
        raise FormatError(path, f"is a folder, not a {what}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise FormatError(os.fsdecode(path).replace("\0", "\\0"), f"cannot open: {exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FormatError(path, f"is a folder, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(path, f"is not a regular file (a FIFO, socket or device); a {what} is a plain file")
        check(limit_name, info.st_size, f"{path}: the {what}'s size")
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            data = f.read(limit(limit_name) + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    check(limit_name, len(data), f"{path}: the {what}'s size")
    return data


def set_timeout(seconds: float) -> None:
    """Set the time limit of each kernel run for this process and the workers it starts (0: none)."""
    if not seconds >= 0:
        raise LimitError(f"a timeout is a number of seconds >= 0, got {seconds}")
    os.environ[variable("timeout_seconds")] = str(int(seconds) if float(seconds).is_integer() else seconds)


def timeout_option(func):
    """The `--timeout SECONDS` option of a command that runs kernels (replay, capture, tune)."""
    import click

    def store(ctx, param, value):
        if value is not None:
            set_timeout(value)
        return value

    return click.option(
        "--timeout",
        type=click.FloatRange(min=0),
        default=None,
        expose_value=False,
        callback=store,
        help="Stop a kernel run after this many seconds, 0 for never "
        f"(default {DEFAULTS['timeout_seconds']}, or {variable('timeout_seconds')}).",
    )(func)


def restrict_worker(default_data_bytes: int | None = None) -> None:
    """Drop what a worker process running other people's kernels does not need (docs/security.md).

    No core dumps (a crashed kernel's memory holds the recording's data), no new privileges
    through setuid programs (``PR_SET_NO_NEW_PRIVS``), and a cap on the worker's data memory
    (RLIMIT_DATA) of ``MNEME_LIMIT_WORKER_DATA_BYTES`` bytes, else of `default_data_bytes` (None:
    no cap; tuning workers have none by default, as GPU drivers map much). Best effort: a
    platform without one of them keeps the others.
    """
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    cap = envvars.get("MNEME_LIMIT_WORKER_DATA_BYTES") or (str(default_data_bytes) if default_data_bytes else "")
    if cap:
        try:
            value = int(cap, 0)
            resource.setrlimit(resource.RLIMIT_DATA, (value, resource.getrlimit(resource.RLIMIT_DATA)[1]))
        except (ValueError, OSError):
            pass
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    except (OSError, AttributeError):
        pass
