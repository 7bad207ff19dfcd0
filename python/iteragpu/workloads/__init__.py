"""Built-in workloads. Each exposes `run(recorder, torch, spec)`."""
