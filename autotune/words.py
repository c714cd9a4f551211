"""Small helpers for the words the tool prints."""


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 trial", "3 trials")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def rounds_named(rounds: list[int]) -> str:
    """Rounds by number, in words: "round 2", "rounds 1 and 3", "rounds 1, 2 and 4"."""
    if len(rounds) == 1:
        return f"round {rounds[0]}"
    return f"rounds {', '.join(map(str, rounds[:-1]))} and {rounds[-1]}"
