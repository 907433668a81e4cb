"""The original Mneme API, as a thin layer of adapters over Mneme's core.

Scripts written against the original Mneme API import its module names
(`mneme.mneme_types`, `mneme.recorded_execution`, `mneme.replay_executor`,
`mneme.async_executor`, `mneme.futures`, `mneme.tuning.search_space`, `mneme.tuning.sample_strategy`,
`mneme.tuning.session`, `mneme.tuning.builtin_spaces`, `mneme.tuning.result_store`, `mneme.tuning.cli`,
`mneme.pipeline`); each is a small module that re-exports from this package.
The core keeps its own behaviour (immutable configurations, seconds, checksummed
snapshots); these adapters convert at the boundary. `docs/original-api.md` lists
every intended difference.
"""
