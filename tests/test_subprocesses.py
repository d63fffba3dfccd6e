"""A contender's child process ends with the stage that started it, however the stage ends."""

import os
import signal
import subprocess
import sys
import time

import pytest

from minimodel.floor.provenance.project import SRC

STAGE = """
import sys, time
from pathlib import Path
from minimodel.contenders.run import Case, Child, _send
from minimodel.contenders.spec import Contender
child = Child(Contender("sleeps", "sleeper:forward"), (Path(sys.argv[1]),))
child._start()
_send(child.to_child, ("output", Case(1, 1, 1, 8, 16, False, "float16", "cpu", 0)))  # now in its call
print(child.process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone, waiting for its parent to read it
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_contender_child_dies_when_its_stage_is_killed_in_the_middle_of_a_call(tmp_path):
    (tmp_path / "sleeper.py").write_text("import time\ndef forward(q, k, v, causal=False):\n"
                                         "    open(__file__ + '.called', 'w').close()\n    time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    stage = subprocess.Popen([sys.executable, "-c", STAGE, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        child = int(stage.stdout.readline())
        deadline = time.monotonic() + 30
        while not (tmp_path / "sleeper.py.called").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "sleeper.py.called").exists() and _alive(child)
        stage.send_signal(signal.SIGKILL)  # no finally, no atexit: only the kernel can stop the child
        stage.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        stage.kill()


WATCHED = """
import sys, time
from minimodel.floor.subprocesses import exit_with_stage
exit_with_stage(poll_s=0.1)
print("watching", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_process_below_launchers_exits_when_the_stage_named_to_it_is_gone():
    # the stage: a process that starts a launcher, which starts the watched process (as ncu does)
    stage = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    env = {**os.environ, "PYTHONPATH": str(SRC), "MINIMODEL_STAGE_PID": str(stage.pid)}
    watched = subprocess.Popen([sys.executable, "-c", WATCHED], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert watched.stdout.readline().strip() == "watching"
        time.sleep(0.3)
        assert watched.poll() is None  # the stage lives: so does it
        stage.kill()
        stage.wait()
        assert watched.wait(10) == 1
    finally:
        stage.kill()
        watched.kill()
