"""Small helpers for the words the tool prints."""


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 trial", "3 trials")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
