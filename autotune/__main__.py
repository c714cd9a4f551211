"""``python -m autotune pipeline=NAME``: see autotune.cli."""

from autotune.cli import main

if __name__ == "__main__":
    main()
