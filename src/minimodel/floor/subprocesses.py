"""Child processes that end with their stage.

The contenders' children (`minimodel.contenders.run`) and the processes Nsight Compute profiles
(`minimodel.gpu.ncu`) run user code that may hang; a stage that is stopped or interrupted must
not leave them holding the GPU.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

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


# The pid of the stage whose processes must end with it, for a process further down a tree it did
# not start itself: ncu starts the profiled process through launchers of its own, so that process's
# parent is not the stage, and its parent-death signal would wait on the launcher.
STAGE_PID_ENV = "MINIMODEL_STAGE_PID"


def exit_with_stage(poll_s: float = 1.0) -> None:
    """Exit this process (at once, no cleanup) when the stage named by `STAGE_PID_ENV` is gone,
    watched from a daemon thread. Without the variable it does nothing."""
    stage = os.environ.get(STAGE_PID_ENV)
    if not stage:
        return

    def watch(pid: int) -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # alive, another user's: not ours to judge
                pass
            time.sleep(poll_s)

    threading.Thread(target=watch, args=(int(stage),), daemon=True, name="exit-with-stage").start()
