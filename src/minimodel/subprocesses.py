"""Child processes that end with their stage.

The contenders' children (`minimodel.contenders.run`) and the processes Nsight Compute profiles
(`minimodel.gpu.ncu`) run user code that may hang; a stage that is stopped or interrupted must
not leave them holding the GPU.
"""

from __future__ import annotations

import sys


def die_with_parent() -> None:
    """On Linux, this process gets SIGKILL when the process that started it ends (given to
    `subprocess.Popen` as preexec_fn, or called first thing in the child; the setting is kept
    across exec). Elsewhere it does nothing."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
