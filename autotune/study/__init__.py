"""The search: which knob values to try, and the Optuna study that tries them."""
