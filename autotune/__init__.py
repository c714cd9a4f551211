"""autotune: find the settings that make a PyTorch training pipeline fastest on this machine.

``python -m autotune`` tunes a pipeline; ``autotune.load_recommended()`` applies its recommended.yaml in a training
script; ``autotune.profile()`` measures a training loop you write yourself.
"""

from autotune.errors import AutotuneError, BaselineFailedError, ConfigError
from autotune.measure.measurement import Measurement
from autotune.measure.profiler import Profiler, profile
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.recommendation import MachineMismatchWarning, Recommendation, load_recommended

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "BaselineFailedError",
    "ConfigError",
    "MachineMismatchWarning",
    "Measurement",
    "Profiler",
    "Recommendation",
    "WarmupPolicy",
    "WindowPlan",
    "__version__",
    "load_recommended",
    "profile",
]
