"""`evo` commands for the agent area (placeholder until the owning module lands)."""


def register(group):
    """Add this module's commands to the `evo` group."""
