"""The original Mneme API's `mneme.tuning` package (see `mneme.compat`; Mneme's own is `mneme.core.tuning`)."""
