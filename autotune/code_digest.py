"""The digest of a pipeline module's source that a study keeps (``user_code`` writes it, in a trial subprocess) and a
resume compares (``autotune/study/start.py``, in the tuner: no torch here). It stands for what Python runs, so a
comment, a blank line, a reformat or a docstring edit changes nothing a study measured.

A digest is ``"tree:<12 hex>/bytes:<12 hex>"``: sha256 of the module's syntax tree without docstrings, and of the
file's bytes; ``"bytes:<12 hex>"`` alone for a file that does not parse. Earlier autotunes stored the bytes digest
bare (``"<12 hex>"``), and their studies resume: two digests are compared by their trees where both hold one, else by
their bytes."""

from __future__ import annotations

import ast
import hashlib
import warnings

# The nodes whose body may open with a docstring, which Python keeps as __doc__ and runs nothing of.
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def source_digest(source: bytes) -> str:
    """The digest of a module's ``source`` (the file's bytes), in the format of this module's docstring."""
    bytes_digest = f"bytes:{_sha(source)}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's invalid escapes were told when Python imported the module
            tree = ast.dump(_without_docstrings(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError):  # not Python, not text, or nested past the parser's depth
        return bytes_digest
    return f"tree:{_sha(tree.encode())}/{bytes_digest}"


def same_code(stored: str, now: str) -> bool:
    """Whether a module digested as ``stored`` (a study's, maybe an earlier autotune's bare bytes digest) runs the
    same code as one digested as ``now``: their trees are compared where both hold one, else their bytes."""
    before, after = _parts(stored), _parts(now)
    kind = "tree" if "tree" in before and "tree" in after else "bytes"
    return before.get(kind) == after.get(kind)


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
