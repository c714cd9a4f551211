"""autotune: find the settings that make a PyTorch training pipeline fastest on this machine."""

from autotune.errors import AutotuneError, BaselineFailedError, ConfigError

__version__ = "0.1.0"

__all__ = ["AutotuneError", "BaselineFailedError", "ConfigError", "__version__"]
