"""Small helpers for the words the tool prints."""

import math


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 trial", "3 trials")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def listed(items: list[str]) -> str:
    """``items`` in words: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def rounds_named(rounds: list[int]) -> str:
    """Rounds by number, in words: "round 2", "rounds 1 and 3", "rounds 1, 2 and 4"."""
    return f"{'round' if len(rounds) == 1 else 'rounds'} {listed([str(r) for r in rounds])}"


def by_the_medians(geomean: float, medians: float) -> str:
    """The ratio of two medians in words, to stand beside a geometric mean of paired ratios where it reads otherwise
    at the two decimals both are said at: "1.86x by the medians"; empty where they read alike."""
    return "" if f"{medians:.2f}" == f"{geomean:.2f}" else f"{medians:.2f}x by the medians"


def slowed_rounds_note(rounds: list[int], named: str | None = None) -> str:
    """Rounds left out of a ratio as a run of each was slowed, in words to follow the paired rounds counted:
    " (round 2 left out: a run of it was slowed)"; empty where none was. ``named``: the rounds in words, where
    their numbers alone do not name them."""
    return f" ({slowed_rounds_left_out(rounds, named=named)})" if rounds else ""


def slowed_rounds_left_out(rounds: list[int], why: str = "was slowed", named: str | None = None) -> str:
    """Rounds left out of a ratio as a run of each was slowed (or ``why`` else), in words: "round 2 left out: a run
    of it was slowed"; ``named``: the rounds in words, where their numbers alone do not name them."""
    return f"{named or rounds_named(rounds)} left out: a run of {'it' if len(rounds) == 1 else 'each'} {why}"


def slowed_rounds_counted(rounds: list[int]) -> str:
    """Slowed rounds a ratio counts, too few rounds being quiet to leave them out (``quiet_rounds``), in words:
    "counting round 3, slowed, too few rounds being quiet to leave it out"."""
    them = "it" if len(rounds) == 1 else "them"
    return f"counting {rounds_named(rounds)}, slowed, too few rounds being quiet to leave {them} out"


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: "45 s", from a minute and a half on "3 min"."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


# A ratio's 95 % interval whose high bound is over this many times its low one bounds nothing a reader could act on
# (two rounds far apart read 0.00-855911x): the pages say it is too wide to read (``interval_bounds``), the records
# keep its bounds.
READABLE_SPAN = 100.0
# Decimals a ratio is printed to, and the most that telling its bounds apart may take.
RATIO_DECIMALS, MOST_DECIMALS = 2, 6


def ratio_bounds(low: float, high: float) -> str:
    """A ratio's interval, "low-high": each bound to RATIO_DECIMALS, more where fewer would print it on 1 or on the
    other side of 1 from where it lies, or the two alike though they differ (up to MOST_DECIMALS): "1.20-1.90",
    "0.996-1.05", "1.003-1.004". The verdict beside an interval (gain, loss, spans 1x) must read true of its figures."""
    for decimals in range(RATIO_DECIMALS, MOST_DECIMALS + 1):
        shown = [_ratio_sided(bound, decimals) for bound in (low, high)]
        if shown[0] != shown[1] or low == high:
            break
    return "-".join(shown)


def _ratio_sided(value: float, decimals: int) -> str:
    """``value`` to ``decimals`` decimals, more (up to MOST_DECIMALS) where fewer would print it on 1 or on the other
    side of 1 from where it lies."""
    for more in range(decimals, MOST_DECIMALS + 1):
        shown = f"{value:.{more}f}"
        if _side_of_one(float(shown)) == _side_of_one(value):
            break
    return shown


def _side_of_one(value: float) -> int:
    return (value > 1) - (value < 1)


def percents(shares: dict[str, float]) -> dict[str, int]:
    """``shares`` (fractions of a whole) as whole percents that add up to their sum rounded, by largest remainder:
    each rounded down, then one more to those that lost most until the sum is reached. Rounded one by one, parts of
    a whole can add up to 99 % or 101 % beside its 100 %."""
    exact = {name: share * 100 for name, share in shares.items()}
    whole = {name: math.floor(value) for name, value in exact.items()}
    short = round(sum(exact.values())) - sum(whole.values())
    for name in sorted(exact, key=lambda name: whole[name] - exact[name])[:short]:
        whole[name] += 1
    return whole


def interval_bounds(low: float, high: float, unit: str = "") -> str:
    """A ratio's 95 % interval as the pages print it: its bounds (``ratio_bounds``) and ``unit``, or "too wide to
    read" where its high bound is over READABLE_SPAN times its low one (its verdict, spanning 1 or not, still
    stands)."""
    return "too wide to read" if high > READABLE_SPAN * low else f"{ratio_bounds(low, high)}{unit}"
