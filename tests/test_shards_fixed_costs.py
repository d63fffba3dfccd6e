"""What every timing shard pays once: its contenders' processes start while its ceilings are
measured (`timing.Starting`), and live as long as the shard needs them."""

import subprocess
import sys
import threading
import time

import pytest

from minimodel.floor.subprocesses import die_with_parent
from minimodel.gpu import timing


class FakeChild:
    """A contender's child: a real process, started as `contenders.run.Child` starts one (dying
    with the thread that started it)."""

    def __init__(self, contender, search):
        self.contender, self.process, self.thread = contender, None, None

    def start(self):
        if self.contender == "broken":
            raise RuntimeError("no such contender")
        self.thread = threading.current_thread()
        self.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                        preexec_fn=die_with_parent)

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()


def test_children_start_beside_the_stage_and_live_until_stopped(monkeypatch):
    monkeypatch.setattr(timing, "Child", FakeChild)
    with timing.starting(["a", "b"]) as start:
        children = start.wait()
        assert [c.contender for c in children] == ["a", "b"]
        assert all(c.thread is not threading.main_thread() for c in children)
        time.sleep(0.5)  # a child whose starting thread had ended would have been killed by now
        assert all(c.process.poll() is None for c in children)
    assert all(c.process.returncode is not None for c in children)
    assert not children[0].thread.is_alive()


def test_a_child_that_cannot_start_raises_in_the_stage(monkeypatch):
    monkeypatch.setattr(timing, "Child", FakeChild)
    with pytest.raises(RuntimeError, match="no such contender"), timing.starting(["a", "broken"]) as start:
        start.wait()
