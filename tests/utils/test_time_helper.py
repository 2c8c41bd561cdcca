"""The process start time a run's wall time counts from."""

import subprocess
import sys
import time

from ding.utils.time_helper import mark_run_end, process_start_time, run_origin


def test_the_process_start_is_before_any_import_of_ding():
    before = time.time()
    code = 'import time; time.sleep(0.5); from ding.utils.time_helper import process_start_time as p; print(p(), time.time())'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    started, now = map(float, out.split())
    # The sleep before the import is counted: the start is the process's own, within the kernel's clock tick.
    assert started >= before - 0.05 and now - started >= 0.5


def test_a_second_run_of_the_process_counts_from_the_end_of_the_first():
    assert run_origin() >= process_start_time() - 0.05
    end = time.time()
    mark_run_end(end)
    assert run_origin() == end
