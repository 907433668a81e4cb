"""The original Mneme API's `mneme.tuning` package: `search_space`, `sample_strategy`, and the current
release's `session`, `builtin_spaces`, `result_store` and `cli` (see `mneme.compat`; Mneme's own is
`mneme.core.tuning`)."""
