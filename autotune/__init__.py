"""autotune: find the settings that make a PyTorch training pipeline fastest on this machine.

``python -m autotune`` tunes a pipeline; ``autotune.load_recommended()`` applies its recommended.yaml in a training
script; ``autotune.profile()`` measures a training loop you write yourself.
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it. Imported on first use (PEP 562), so that the tuner's own process, which
# never runs the user's code, does not pay for importing torch.
_EXPORTS = {
    "AutotuneError": "autotune.errors",
    "BaselineFailedError": "autotune.errors",
    "ConfigError": "autotune.errors",
    "MachineMismatchWarning": "autotune.recommendation",
    "Measurement": "autotune.measure.measurement",
    "Profiler": "autotune.measure.profiler",
    "Recommendation": "autotune.recommendation",
    "UntrimmedWarning": "autotune.recommendation",
    "WarmupPolicy": "autotune.measure.warmup",
    "WindowPlan": "autotune.measure.recorder",
    "load_recommended": "autotune.recommendation",
    "profile": "autotune.measure.profiler",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
