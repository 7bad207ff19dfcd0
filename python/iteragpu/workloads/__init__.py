"""Built-in workloads. Each exposes `run(recorder, torch, spec)`."""


class Missing(Exception):
    """A package a workload needs is not installed: reported as `unavailable` (exit 2)."""
