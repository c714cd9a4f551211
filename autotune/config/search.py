"""The ``search`` section's keys, from the table of keys, given to Hydra before it composes a config.

``search.KNOB`` exists for every registered knob (null: candidates derived from the machine and the pipeline), so
``search.KNOB=[...]`` works on the command line for a knob conf/config.yaml does not list.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from autotune.config.keys import KEYS

# The name conf/config.yaml's defaults list uses for it.
SEARCH_NODE = "knob_search"


def register_search_node() -> None:
    node = {path.removeprefix("search."): key.default for path, key in KEYS.items() if path.startswith("search.")}
    ConfigStore.instance().store(name=SEARCH_NODE, package="search", node=node)
