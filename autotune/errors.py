"""The library's exceptions: everything autotune raises on purpose derives from AutotuneError; a stop signal is a
KeyboardInterrupt, as Ctrl-C's is."""

import signal


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose.

    ``exit_code`` is what the command line exits with when this error reaches it.
    """

    exit_code = 1


class ConfigError(AutotuneError):
    """The configuration is wrong; the message names the offending key or file."""

    exit_code = 2

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}" if key else problem)


class BaselineFailedError(AutotuneError):
    """The user's pipeline failed as configured, so there is nothing to tune."""

    exit_code = 1


class StudyAbortedError(AutotuneError):
    """Tuning stopped early because something is wrong (e.g. every recent trial failed)."""

    exit_code = 1


class PlacementRefusedError(AutotuneError):
    """A trial's process refused the cores its slot pins it to (study.cpu_sets; ``FailureKind.PLACEMENT``): the cores
    the machine lets the run use shrank since it began. The run stops, what it measured kept and reported; the message
    names the key, the cores and the remedy. Exit 1, not a refused input's 2: the input was good when the run began,
    and the run measured and stored what it could (``cli._run`` keeps its record)."""

    exit_code = 1


class StudyMismatchError(AutotuneError):
    """A stored study of the same name was created with different settings."""

    exit_code = 2


class RegressionError(AutotuneError):
    """mode=check failed: the recommendation's speedup fell beyond the tolerance, or the recommendation or the baseline
    could not be measured in enough rounds to tell."""

    exit_code = 1


class NotMeasuredError(AutotuneError):
    """mode=benchmark could not measure the recommendation and the baseline in enough rounds for an interval."""

    exit_code = 1


class HarnessDisagreesError(AutotuneError):
    """mode=selfcheck found the harness and the plain loop apart beyond AGREEMENT for a configuration."""

    exit_code = 1


class Stopped(KeyboardInterrupt):
    """A stop signal other than SIGINT (SIGTERM, SIGHUP), raised in the main thread so the run stops as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The signal that raised ``stop``: SIGINT (Ctrl-C: Python's own KeyboardInterrupt) unless it is ``Stopped``."""
    return signal.Signals(stop.signum if isinstance(stop, Stopped) else signal.SIGINT)
