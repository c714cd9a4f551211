"""Running one trial: a fresh subprocess that builds the pipeline, applies knobs and measures."""
