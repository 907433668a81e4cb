"""The recording database's JSON schema: the cattrs converter, field names and upgrades of older versions.

The format is specified in docs/formats.md (recording database).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cattrs
from cattrs.errors import ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from mneme.core.errors import FormatError, SchemaVersionError
from mneme.core.records import model
from mneme.core.records.model import ImageInfo, KernelInstance, RecordedExecution
from mneme.core.types import converter as _types_converter
from mneme.core.types import dim3

_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})*$")


# -- JSON conversion ---------------------------------------------------------------------------

# attribute name -> JSON key, per class; everything else in the JSON is an error.
_JSON_NAMES: dict[type, dict[str, str]] = {
    RecordedExecution: {
        "schema_version": "SchemaVersion",
        "kernel_name": "KernelName",
        "demangled_name": "DemangledName",
        "static_hash": "StaticHash",
        "backend": "Backend",
        "arch": "Arch",
        "modules": "Modules",
        "images": "BinaryBlobs",
        "va_addr": "VAddr",
        "va_size": "VASize",
        "arg_names": "ArgNames",
        "arg_sizes": "ArgSizes",
        "arg_offsets": "ArgOffsets",
        "arg_kinds": "ArgKinds",
        "specializations": "Specializations",
        "globals": "Globals",
        "kernel_instances": "instances",
    },
    KernelInstance: {
        "grid_dim": "GridDims",
        "block_dim": "BlockDims",
        "shared_mem": "SharedMem",
        "args": "Args",
        "prologue_file": "Prologue",
        "epilogue_file": "Epilogue",
        "occ": "Occurrences",
        "app_times": "AppTimes",
        "app_timer": "AppTimer",
        "cooperative": "Cooperative",
        "cluster_dim": "ClusterDims",
        "recorded_time": "RecordedTime",
        "recorded_cache": "RecordedCache",
    },
    ImageInfo: {"path": "Path", "kind": "Kind"},
}
# JSON key order in written files.
_ORDER = [
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
# Fields a database may omit (empty / zero by default); all others are required.
_OPTIONAL = {"DemangledName", "Modules", "BinaryBlobs", "VAddr", "VASize", "Globals"}


def _strict(kind: type, name: str):
    def hook(value: Any, _type: type) -> Any:
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise TypeError(f"expected {name}, got {_json_type(value)} {value!r}"[:200])
        return kind(value) if kind is float else value

    return hook


def _json_type(value: Any) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _structure_dim3(value: Any, _type: type) -> dim3:
    if not isinstance(value, dict) or set(value) != {"x", "y", "z"}:
        raise TypeError(f"expected an object with integer keys x, y, z, got {json.dumps(value)[:80]}")
    return dim3(value["x"], value["y"], value["z"])


def _structure_hex_addr(value: Any, _type: type) -> int:
    if not isinstance(value, str) or not re.fullmatch(r"0x[0-9a-fA-F]+", value):
        raise TypeError(f'expected a hexadecimal string such as "0x7f0000000000", got {json.dumps(value)[:80]}')
    return int(value, 16)


def _structure_hex_bytes(value: Any, _type: type) -> bytes:
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        raise TypeError(
            f"expected the argument bytes as an even-length hexadecimal string, got {json.dumps(value)[:80]}"
        )
    return bytes.fromhex(value)


def _structure_path(value: Any, _type: type) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"expected a relative path string, got {_json_type(value)}")
    return value


def _make_converter() -> cattrs.Converter:
    conv = _types_converter.copy(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict(float, "a number"))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(bool, _strict(bool, "a boolean (true or false)"))
    conv.register_structure_hook(dim3, _structure_dim3)
    conv.register_unstructure_hook(dim3, lambda d: {"x": d.x, "y": d.y, "z": d.z})

    names = _JSON_NAMES[ImageInfo]
    conv.register_structure_hook(
        ImageInfo,
        make_dict_structure_fn(
            ImageInfo,
            conv,
            _cattrs_forbid_extra_keys=True,
            path=override(rename=names["path"], struct_hook=lambda v, _t: Path(_structure_path(v, _t))),
            kind=override(rename=names["kind"]),
        ),
    )
    conv.register_unstructure_hook(
        ImageInfo,
        make_dict_unstructure_fn(
            ImageInfo,
            conv,
            path=override(rename=names["path"], unstruct_hook=lambda p: p.as_posix()),
            kind=override(rename=names["kind"]),
        ),
    )

    names = _JSON_NAMES[KernelInstance]
    inst_overrides = {attr: override(rename=key) for attr, key in names.items()}
    inst_overrides["args"] = override(rename="Args", struct_hook=_structure_hex_bytes, unstruct_hook=bytes.hex)
    for attr in ("prologue_file", "epilogue_file"):
        inst_overrides[attr] = override(rename=names[attr], struct_hook=_structure_path)
    inst_overrides["app_times"] = override(rename="AppTimes", omit_if_default=True)  # optional: absent = unknown
    inst_overrides["app_timer"] = override(rename="AppTimer", omit_if_default=True)  # optional: absent = events
    inst_overrides["cooperative"] = override(rename="Cooperative", omit_if_default=True)  # optional: absent = false
    inst_overrides["cluster_dim"] = override(rename="ClusterDims", omit_if_default=True)  # optional: absent = none
    inst_overrides["recorded_time"] = override(
        rename="RecordedTime", omit_if_default=True
    )  # optional: absent = unknown
    inst_overrides["recorded_cache"] = override(rename="RecordedCache", omit_if_default=True)  # absent = flushed
    conv.register_structure_hook(
        KernelInstance,
        make_dict_structure_fn(
            KernelInstance,
            conv,
            _cattrs_forbid_extra_keys=True,
            dynamic_hash=override(omit=True),
            _record=override(omit=True),
            **inst_overrides,
        ),
    )
    conv.register_unstructure_hook(
        KernelInstance,
        make_dict_unstructure_fn(
            KernelInstance, conv, dynamic_hash=override(omit=True), _record=override(omit=True), **inst_overrides
        ),
    )

    names = _JSON_NAMES[RecordedExecution]
    rec_overrides = {attr: override(rename=key) for attr, key in names.items()}
    rec_overrides["va_addr"] = override(rename="VAddr", struct_hook=_structure_hex_addr, unstruct_hook=hex)
    conv.register_structure_hook(
        RecordedExecution,
        make_dict_structure_fn(
            RecordedExecution,
            conv,
            _cattrs_forbid_extra_keys=True,
            path=override(omit=True),
            _linked=override(omit=True),
            **rec_overrides,
        ),
    )
    conv.register_unstructure_hook(
        RecordedExecution,
        make_dict_unstructure_fn(
            RecordedExecution, conv, path=override(omit=True), _linked=override(omit=True), **rec_overrides
        ),
    )
    return conv


converter = _make_converter()


def document(rec: RecordedExecution) -> dict[str, Any]:
    data = converter.unstructure(rec)
    data["SchemaVersion"] = model.SCHEMA_VERSION
    return {key: data[key] for key in _ORDER}


def collect(exc: BaseException, path: str, names: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(JSON field path, message) for every leaf error of a cattrs validation error."""
    out: list[tuple[str, str]] = []
    if isinstance(exc, cattrs.ClassValidationError):
        names = _JSON_NAMES.get(exc.cl, {})
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            key = names.get(note.name, note.name)
            out += collect(inner, f"{path}.{key}" if path else key)
        for inner in without:  # attrs validators: "<attribute> must be ..."
            out += collect(inner, path, names)
    elif isinstance(exc, IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            index = note.index
            out += collect(inner, f"{path}.{index}" if isinstance(index, str) else f"{path}[{index}]")
        for inner in without:
            out += collect(inner, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        known = sorted(_JSON_NAMES.get(exc.cl, {}).values())
        extra = ", ".join(sorted(exc.extra_fields))
        out.append((path or "$", f"unknown field(s) {extra}; this reader knows {', '.join(known)}"))
    elif isinstance(exc, KeyError):
        out.append((path, "required field is missing"))
    elif isinstance(exc, cattrs.BaseValidationError):
        for inner in exc.exceptions:
            out += collect(inner, path)
    else:
        message = str(exc)
        word, _, rest = message.partition(" ")
        if rest.startswith("must") and word.isidentifier():
            key = (names or {}).get(word, word)
            path, message = (f"{path}.{key}" if path else key), rest
        out.append((path, message))
    return out or [(path, str(exc))]


# Upgrades from older schema versions: version -> function(data) returning the next version's data.
def _upgrade_1_to_2(data: dict) -> dict:
    # Version 2 adds the optional instance field AppTimes; a version-1 instance has none (unknown).
    data["SchemaVersion"] = 2
    return data


def _upgrade_2_to_3(data: dict) -> dict:
    # Version 3 adds the optional instance field AppTimer; version 2's AppTimes were all stream events,
    # which is what an absent AppTimer means.
    data["SchemaVersion"] = 3
    return data


def _upgrade_3_to_4(data: dict) -> dict:
    # Version 4 adds the optional instance fields Cooperative and ClusterDims; a version-3 recorder
    # recorded every launch as a plain one, which is what their absence means.
    data["SchemaVersion"] = 4
    return data


def _upgrade_4_to_5(data: dict) -> dict:
    # Version 5 adds the optional instance fields RecordedTime and RecordedCache; a version-4 database
    # kept the recorded launch's time only as the first of AppTimes, unlabelled: unknown.
    data["SchemaVersion"] = 5
    return data


_UPGRADES: dict[int, Any] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3, 3: _upgrade_3_to_4, 4: _upgrade_4_to_5}


def upgrade(data: Any, path: Path) -> Any:
    if not isinstance(data, dict):
        raise FormatError(path, f"a recording database is a JSON object, not {_json_type(data)}")
    version = data.get("SchemaVersion")
    if "SchemaVersion" not in data:
        raise FormatError(path, "required field is missing; is this a Mneme recording database?", field="SchemaVersion")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(path, f"expected a positive integer, got {json.dumps(version)}", field="SchemaVersion")
    if version > model.SCHEMA_VERSION:
        raise SchemaVersionError(
            path,
            f"the database has schema version {version}, newer than the {model.SCHEMA_VERSION} "
            "this Mneme reads; upgrade Mneme to read it",
            field="SchemaVersion",
        )
    while version < model.SCHEMA_VERSION:
        data = _UPGRADES[version](dict(data))
        version = data["SchemaVersion"]
    missing = [key for key in _ORDER if key not in data and key not in _OPTIONAL]
    if len(missing) == 1:
        raise FormatError(path, "required field is missing", field=missing[0])
    if missing:
        raise FormatError(path, f"required fields are missing: {', '.join(missing)}", field=missing[0])
    return data


model.codec = sys.modules[__name__]  # the model's JSON form is this module's (see model.codec)
