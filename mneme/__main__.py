"""`python -m mneme`: the `mneme` command, where its script is not on PATH."""

from mneme.core.interrupt import main

main()
