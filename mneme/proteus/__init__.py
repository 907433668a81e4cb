"""The original Mneme API's `mneme.proteus` package (see `mneme.compat`)."""
