"""Child processes that end with their stage.

The contenders' children (`minimodel.contenders.run`) and the processes Nsight Compute profiles
(`minimodel.gpu.ncu`) run user code that may hang; a stage that is stopped or interrupted must
not leave them holding the GPU.
"""

from __future__ import annotations

import signal
import sys

PR_SET_PDEATHSIG = 1
# looked up once, here: a preexec_fn runs between fork and exec, where loading a library could
# wait forever on a lock another thread of the parent held at the fork
_prctl = None
if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent() -> None:
    """On Linux, this process gets SIGKILL when the thread that started it ends, which for the
    stages is their main thread, that is, the stage. Given to `subprocess.Popen` as preexec_fn,
    or called first thing in a child; the setting is kept across exec. Elsewhere it does nothing."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
