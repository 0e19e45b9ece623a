"""Session-wide test settings: tqdm's lock is per process and its monitor thread is off.

Why (found under mutation testing, docs/testing.md): mutmut (scripts/mutation.sh) forks one child per mutant
from a process that has already run the tests. tqdm's default lock pairs a thread lock with a multiprocessing
semaphore that every forked child shares, and ``tqdm.refresh`` does not release it when drawing the bar raises
(a mutant such as ``unit=None`` in ``find_math_params_multi``'s bar does that): one such child leaves the semaphore
taken, and every later mutant whose tests create a bar waits for it until its timeout. A plain ``RLock`` is copied
per child instead, so a child can only block itself. The monitor thread (started by a process's first bar, even
a disabled one) takes the same lock every 10 s; off, no thread is running when mutmut forks. The monitor only
corrects the refresh rate of very slow bars and the lock only orders bars drawn by several processes: no test
looks at either.
"""

from __future__ import annotations

import os
import threading

import tqdm.std

# the fixtures that tests in several folders use, in one place (pytest finds them here)
from tests._fakehub import fake_hub, out_dir  # noqa: F401
from tests._real_model import gemma3, smollm2  # noqa: F401

tqdm.std.tqdm.monitor_interval = 0
tqdm.std.tqdm.set_lock(threading.RLock())

# Under pytest-xdist (the README's `-n 2`), each worker gets its share of the cores: torch's default of one thread
# per core in every worker oversubscribes them (two threads in one process were slower than one on this 2-core
# machine: docs/performance.md "The boost search"); the CLI subprocesses tests start inherit the same limit.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)
