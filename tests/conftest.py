"""Session-wide test settings.

tqdm's monitor thread is off for the whole test session. tqdm starts it on the first bar of a process (even a
disabled one) and it takes tqdm's lock every 10 s; that lock pairs a thread lock with a multiprocessing semaphore
shared by every forked process. mutmut (scripts/mutation.sh) forks one child per mutant from a process that has
already run the tests: a fork while the monitor holds the thread lock gives a child that takes the shared
semaphore and then waits forever on its copy of the thread lock; when that child is killed at its timeout the
semaphore stays taken, and every later mutant whose tests create a bar hangs until its timeout too (seen on the
mask module: a run of consecutive "timeouts", docs/testing.md). The monitor only corrects the refresh rate of
very slow bars, which no test looks at.
"""

from __future__ import annotations

import tqdm.std

tqdm.std.tqdm.monitor_interval = 0
