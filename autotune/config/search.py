"""The ``search`` section's keys, derived from the knob registry and given to Hydra before it composes a config.

``search.KNOB`` exists for every registered knob (null: candidates derived from the machine and the pipeline), so
``search.KNOB=[...]`` works on the command line for a knob conf/config.yaml does not list.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from autotune.knobs import KNOBS

# The name conf/config.yaml's defaults list uses for it.
SEARCH_NODE = "knob_search"


def register_search_node() -> None:
    ConfigStore.instance().store(
        name=SEARCH_NODE, package="search", node={"batch_policy": "free", **dict.fromkeys(KNOBS)}
    )
