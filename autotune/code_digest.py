"""The digest of a pipeline module's source that a study keeps (``user_code`` writes it, in a trial subprocess) and a
resume compares (``autotune/study/start.py``, in the tuner: no torch here). It stands for what Python runs, so a
comment, a blank line, a reformat or a docstring edit changes nothing a study measured.

A digest is ``"treeXY:<12 hex>/bytes:<12 hex>"``: sha256 of the module's syntax tree without docstrings as Python
X.Y dumps it (type comments kept: TorchScript reads them), and of the file's bytes; ``"bytes:<12 hex>"`` alone for a
file that does not parse. Earlier autotunes stored the bytes digest bare (``"<12 hex>"``), and their studies resume:
two digests are the same code where their bytes are, else where their trees of one Python version are."""

from __future__ import annotations

import ast
import hashlib
import sys
import warnings

# The nodes whose body may open with a docstring, which Python keeps as __doc__ and runs nothing of.
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


# ``ast.dump`` writes a tree as the running Python's version knows it (3.12 added fields, 3.13 leaves empty ones out):
# trees are compared only where the same version dumped both.
_TREE = f"tree{sys.version_info.major}{sys.version_info.minor}"


def source_digest(source: bytes) -> str:
    """The digest of a module's ``source`` (the file's bytes), in the format of this module's docstring."""
    bytes_digest = f"bytes:{_sha(source)}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's invalid escapes were told when Python imported the module
            # Type comments are code to TorchScript (a signature's types); "# type: ignore" is not, and would
            # carry its line number.
            tree = ast.parse(source, type_comments=True)
            tree.type_ignores = []
            dumped = ast.dump(_without_docstrings(tree))
    except (SyntaxError, ValueError, RecursionError):  # not Python, not text, or nested past the parser's depth
        return bytes_digest
    return f"{_TREE}:{_sha(dumped.encode())}/{bytes_digest}"


def same_code(stored: str, now: str) -> bool:
    """Whether a module digested as ``stored`` (a study's, maybe an earlier autotune's bare bytes digest) runs the
    same code as one digested as ``now``: the same bytes do; else their trees are compared where the same Python
    version dumped both."""
    before, after = _parts(stored), _parts(now)
    if before.get("bytes") == after.get("bytes"):
        return True
    trees = {kind for kind in before if kind.startswith("tree")} & {kind for kind in after if kind.startswith("tree")}
    return any(before[kind] == after[kind] for kind in trees)


def _parts(digest: str) -> dict[str, str]:
    """``digest``'s parts by kind ("tree", "bytes"); a bare digest (an earlier autotune's) is the bytes'."""
    if ":" not in digest:
        return {"bytes": digest}
    return {kind: value for kind, _, value in (part.partition(":") for part in digest.split("/"))}


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """``tree`` with the docstring of the module and of each class and function left out."""
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:]
    return tree


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]
