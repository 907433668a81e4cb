"""Built-in samplers. Each family is its own plugin (`registration`), registered through the
`mneme_samplers` hook like third-party ones."""
