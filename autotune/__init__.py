"""autotune: find the settings that make a PyTorch training pipeline fastest on this machine.

``autotune.profile()`` measures a training loop you write yourself; ``python -m autotune`` tunes a pipeline.
"""

from autotune.errors import AutotuneError, BaselineFailedError, ConfigError
from autotune.measure.measurement import Measurement
from autotune.measure.profiler import Profiler, profile
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "BaselineFailedError",
    "ConfigError",
    "Measurement",
    "Profiler",
    "WarmupPolicy",
    "WindowPlan",
    "__version__",
    "profile",
]
