"""Refusals of a pipeline choice that cannot be what the user meant: a list of pipelines (``refuse_pipeline_list``),
a path or NAME.yaml where its config's name names the study (``refuse_pipeline_path``), the pipeline/ folder given
as the config folder (``refuse_pipeline_folder_given``, ``pipeline_folder_given``), and a pipeline of the user's
that one of autotune's examples (``CONFIG_DIR``) shadows (``refuse_shadowed_pipeline``). The command line that asks
is ``autotune/cli.py``.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from autotune.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "conf"


def refuse_pipeline_list(overrides: list[str]) -> None:
    """Refuse ``pipeline=[a,b]``: Hydra merges the files into one config that is none of them."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "pipeline" and value.startswith("["):
            raise ConfigError(
                "pipeline",
                f"give one pipeline name, not a list ({value}); to tune several, one run each: --multirun "
                f"pipeline={value.strip('[]')}",
            )


def refuse_pipeline_path(choice: str | None) -> None:
    """Refuse a pipeline chosen by other than its config's name: NAME.yaml, or a path through a folder
    (../pipeline/NAME, ./NAME). Hydra loads the file all the same (NAME.yaml from autotune's examples first, where one
    has the name), while the choice names the study: one file would be tuned in a study of each spelling."""
    if choice is None:
        return
    path = posixpath.normpath(posixpath.join("pipeline", choice.removesuffix(".yaml")))
    name = path.removeprefix("pipeline/")
    if name == path:  # outside pipeline/
        raise ConfigError(
            "pipeline",
            f"pipeline={choice} leaves the pipeline/ folder; give a config of it by its name: pipeline=NAME for "
            "pipeline/NAME.yaml",
        )
    if name != choice:
        raise ConfigError(
            "pipeline", f"give pipeline={name} (its config's name, which names its study), not pipeline={choice}"
        )


def refuse_pipeline_folder_given(choice: str | None, sources: list) -> None:
    """Refuse a run whose config folder (``-cd``, ``hydra.searchpath``) is the pipeline/ folder itself, holding the
    chosen NAME.yaml (``pipeline_folder_given``): Hydra looks for pipeline/NAME.yaml under it, so it found
    autotune's example of that name."""
    if choice is None:
        return
    refusal = pipeline_folder_given(choice, [Path(source.path) for source in sources if source.schema == "file"])
    if refusal:
        raise refusal


def pipeline_folder_given(name: str, folders: list[Path]) -> ConfigError | None:
    """The refusal, naming ``-cd``, of the first of the user's ``folders`` (autotune's own, ``_is_autotunes``, left
    out) that holds NAME.yaml, where none holds pipeline/NAME.yaml: the pipeline/ folder given for the folder above
    it, which Hydra reads the pipeline/ folder of. Where one holds pipeline/NAME.yaml, that is the file loaded (one
    an example of autotune's shadows: ``refuse_shadowed_pipeline``), and a NAME.yaml beside it is no pipeline's."""
    theirs = [folder for folder in folders if not _is_autotunes(folder)]
    if any((folder / "pipeline" / f"{name}.yaml").exists() for folder in theirs):
        return None
    for folder in theirs:
        if (folder / f"{name}.yaml").is_file():
            above = Path(os.path.abspath(folder)).parent
            return ConfigError(
                "-cd",
                f"{folder} holds {name}.yaml itself; give the folder that holds your pipeline/ folder: -cd {above}",
            )
    return None


def _is_autotunes(folder: Path) -> bool:
    """Whether ``folder`` is autotune's own config folder (CONFIG_DIR, whose config.yaml is no pipeline) or its
    pipeline/ folder of examples (one given as a user's folder loads the example the user named)."""
    return folder.resolve() in (CONFIG_DIR, CONFIG_DIR / "pipeline")


def refuse_shadowed_pipeline(choice: str | None, sources: list) -> None:
    """Refuse a pipeline of the user's config folder (``-cd``, ``hydra.searchpath``) that one of autotune's examples
    of the same name shadows: Hydra searches autotune's conf/ first, so the example would be tuned in its place."""
    shipped = CONFIG_DIR / "pipeline" / f"{choice}.yaml"
    if choice is None or not shipped.exists():
        return
    for source in sources:
        theirs = Path(source.path) / "pipeline" / f"{choice}.yaml"
        if source.schema == "file" and theirs.exists() and theirs.resolve() != shipped.resolve():
            raise ConfigError(
                "pipeline",
                f"{theirs} has the name of autotune's example {choice!r}, which would be loaded in its place; "
                "rename your file and give its new name",
            )
