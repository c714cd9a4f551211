"""Settings: the validated, plain-data form of the Hydra config."""

from autotune.config.settings import MeasureSettings, Settings, StudySettings

__all__ = ["MeasureSettings", "Settings", "StudySettings"]
