"""Built-in plugins, registered through the `mneme` entry-point group like third-party ones."""
