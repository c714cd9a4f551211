"""Settings: the validated, plain-data form of the Hydra config."""

from autotune.config.search import register_search_node
from autotune.config.settings import MeasureSettings, Settings, StudySettings

register_search_node()

__all__ = ["MeasureSettings", "Settings", "StudySettings"]
