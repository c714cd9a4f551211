"""Running one trial: a process of its own that builds the pipeline, applies knobs and measures."""
