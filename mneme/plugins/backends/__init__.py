"""Built-in backend plugins."""
