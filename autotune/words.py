"""Small helpers for the words the tool prints."""


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 trial", "3 trials")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def listed(items: list[str]) -> str:
    """``items`` in words: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def rounds_named(rounds: list[int]) -> str:
    """Rounds by number, in words: "round 2", "rounds 1 and 3", "rounds 1, 2 and 4"."""
    return f"{'round' if len(rounds) == 1 else 'rounds'} {listed([str(r) for r in rounds])}"


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: "45 s", from a minute and a half on "3 min"."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
