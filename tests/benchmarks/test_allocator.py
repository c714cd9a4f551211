import subprocess
import sys
import textwrap

import pytest

from benchmarks.allocator import ADDR_NO_RANDOMIZE
from benchmarks.common import knob_values


def test_knob_assignments_are_read_as_yaml_scalars():
    assert knob_values(["malloc=keep", "num_threads=1", "prefetch_factor=null"]) == {
        "malloc": "keep",
        "num_threads": 1,
        "prefetch_factor": None,
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="personality(2) is Linux's")
def test_a_fixed_layout_reaches_every_process_started_after_it():
    """fix_layout in a process of its own (it changes its caller for good): the processes it starts run without
    address-space randomisation and with one hash seed."""
    code = textwrap.dedent(
        """
        import subprocess, sys
        from benchmarks.allocator import fix_layout
        fix_layout()
        child = "import os; print(open('/proc/self/personality').read().strip(), os.environ['PYTHONHASHSEED'])"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0 and "cannot be turned off here" in done.stderr:
        pytest.skip(done.stderr.strip())
    personality, seed = done.stdout.split()
    assert int(personality, 16) & ADDR_NO_RANDOMIZE and seed == "0"
