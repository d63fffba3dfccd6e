"""What a stage writes to the console: progress bars as whole lines, never a line left open."""

import io

from tqdm import tqdm

from minimodel.floor.provenance.console import Progress


class Recorder(io.StringIO):
    """A stream that keeps each write apart, as the terminal's other writers see them."""

    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


def test_a_bar_is_whole_lines_its_first_and_last_state_and_one_per_interval():
    now = [0.0]
    terminal, log = Recorder(), Recorder()
    stream = Progress(log, terminal, interval=10, clock=lambda: now[0])
    for _ in tqdm(range(4), desc="correctness", file=stream, mininterval=0, miniters=1):
        now[0] += 1  # four steps in 4 s: only the first state and the last
    for _ in tqdm(range(30), desc="timing", file=stream, mininterval=0, miniters=1):
        now[0] += 1  # 30 s: a line at the start, at 10 s, 20 s, 30 s, and the last
    print("gpu_timing: a line of the stage's own", file=stream)
    lines = terminal.getvalue().splitlines()
    assert terminal.getvalue() == log.getvalue()
    assert "\r" not in terminal.getvalue()
    # every write ends its line: another process's line (Snakemake's timestamps) cannot glue on
    assert all(w.endswith("\n") for w in terminal.writes), terminal.writes
    assert [line.split("|")[0].strip() for line in lines[:2]] == ["correctness:   0%", "correctness: 100%"]
    assert "4/4" in lines[1]
    timing = [line for line in lines if line.startswith("timing")]
    assert "0/30" in timing[0] and "30/30" in timing[-1] and 4 <= len(timing) <= 5, timing
    assert lines[-1] == "gpu_timing: a line of the stage's own"


def test_plain_lines_and_blank_lines_pass_through():
    terminal = Recorder()
    stream = Progress(terminal)
    print("one", file=stream)
    print(file=stream)
    stream.write("two, ")
    stream.write("in pieces\n")
    assert terminal.getvalue() == "one\n\ntwo, in pieces\n"
