"""A configuration as users give it: a JSON/YAML file of `ExperimentConfiguration` fields, then options.

`mneme replay --config`, `mneme ir ... --config` and the Python API (`mneme.api.replay(config=...)`)
resolve a configuration here: the recorded launch, updated by the file's fields (a tuning run's
``best.json`` holds them under ``"config"``), then by single options (``--block-dim-x 128``).
Unknown fields and newer schemas are refused with the file named.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mneme.core import limits, params
from mneme.core.errors import FormatError, UsageError
from mneme.core.types import ExperimentConfiguration


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The configuration fields in a JSON/YAML file: a configuration, or {"config": {...}} as tuning exports."""
    path = Path(path)
    data = limits.load_yaml(limits.read_text(path, "configuration file"), path)  # no aliases, bounded
    if isinstance(data, Mapping) and isinstance(data.get("config"), Mapping):
        data = data["config"]
    if not isinstance(data, Mapping):
        raise FormatError(path, "a configuration file holds a mapping of ExperimentConfiguration fields")
    return dict(data)


def resolve_config(
    default: ExperimentConfiguration,
    file_fields: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
) -> ExperimentConfiguration:
    """The recorded launch, updated by a configuration file's fields, then by command-line options.

    `overrides` may hold `grid_dim_x`..`block_dim_z` (one component each) and any
    configuration field; None values are ignored (the option was not given).
    """
    data = default.to_dict()
    data.pop("schema", None)
    known = set(data) | params.known_names()
    if file_fields:
        file_fields = dict(file_fields)
        schema = file_fields.pop("schema", 1)
        if not isinstance(schema, int) or schema > params.SCHEMA:
            raise FormatError(
                source,
                f"configuration schema {schema!r} is newer than this Mneme reads "
                f"(up to {params.SCHEMA}); upgrade Mneme",
            )
        unknown = sorted(set(file_fields) - known)
        if unknown:
            raise FormatError(
                source,
                f"unknown configuration field(s) {', '.join(unknown)} "
                f"({params.nearest(unknown[0])}); known: {', '.join(sorted(known))}",
            )
        data.update(file_fields)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key.startswith(("grid_dim_", "block_dim_")):
            which, axis = key.rsplit("_", 1)[0].split("_")[0], key[-1]
            dims = dict(data[which]) if isinstance(data[which], Mapping) else _dims(data[which])
            dims[axis] = value
            data[which] = dims
        elif key in known:
            data[key] = value
        else:
            raise UsageError(f"unknown configuration option {key!r}")
    try:  # construct directly: the validators' messages name the field and the allowed values
        return ExperimentConfiguration(**data)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{source or 'command line'}: invalid configuration: {exc}") from exc


def _dims(value: Any) -> dict[str, int]:
    from mneme.core.types import dim3

    return dim3.of(value).to_dict()
