"""What a stage shows on the console, and where the processes it starts write.

`Progress` is `stage.progress` (`minimodel.floor.provenance.manifest.stage`): a stream for tqdm bars and
the stage's few console lines, written to the rule's log and the terminal alike. A bar is written
as whole lines: its first state, then at most one line per `interval` seconds, then its last
state. Snakemake's own lines (another process, on the same terminal) then never land in the
middle of a bar, and the log holds no carriage returns.

`rule_log` names the rule's log in RULE_LOG_ENV for the stage's duration: a contender's child
process (`minimodel.contenders.run.Child`) appends its stdout and stderr there.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator

from minimodel.floor.provenance.project import RULE_LOG_ENV

BAR_INTERVAL_S = 10.0


class Progress:
    """A text stream writing whole lines to several; tqdm's carriage-return refreshes of a bar
    become lines, at most one per `interval` seconds besides its first and last."""

    def __init__(self, *streams, interval: float = BAR_INTERVAL_S, clock=time.monotonic):
        self.streams, self.interval, self.clock = streams, interval, clock
        self.line = ""  # the text since the last carriage return or newline
        self.in_bar = False  # `line` follows a carriage return: a bar's state
        self.shown = False  # `line` has been written out
        self.last: float | None = None  # when the current bar's state was last written out

    def write(self, text: str) -> int:
        for piece in re.split(r"([\r\n])", text):
            if piece == "\n":
                if not self.shown and (self.line.strip() or not self.in_bar):
                    self._out(self.line)
                self.line, self.in_bar, self.shown, self.last = "", False, False, None
            elif piece == "\r":
                self.line, self.in_bar, self.shown = "", True, False
            else:
                self.line += piece
        if self.in_bar and self.line.strip() and not self.shown:
            now = self.clock()
            if self.last is None or now - self.last >= self.interval:
                self._out(self.line)
                self.shown, self.last = True, now
        return len(text)

    def _out(self, line: str) -> None:
        for stream in self.streams:
            stream.write(line.rstrip() + "\n")
            stream.flush()

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


@contextlib.contextmanager
def rule_log(path: str | os.PathLike | None) -> Iterator[None]:
    """RULE_LOG_ENV names `path` (the rule's log) for the block: the processes the stage starts
    append their output there. None leaves it as it is."""
    saved = os.environ.get(RULE_LOG_ENV)
    if path is not None:
        os.environ[RULE_LOG_ENV] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(RULE_LOG_ENV, None)
        else:
            os.environ[RULE_LOG_ENV] = saved
