"""A stand-in for the trial worker (``python -m tests.trial.pools_at_start OUT``): writes to OUT the cores it started
on, read before any import, and the threads torch's pool has once imported, which it sizes from the cores it sees."""

import os
import sys

started_on = sorted(os.sched_getaffinity(0))

import json  # noqa: E402  (after the reading above, which no import may come before)

import torch  # noqa: E402

with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump({"started_on": started_on, "torch_threads": torch.get_num_threads()}, out)
