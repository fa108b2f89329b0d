"""The ``fsmem`` command."""
