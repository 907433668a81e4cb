"""The small, stable core of Mneme. It knows no vendor API and imports no plugin by name."""
