"""Running a contender where it cannot hurt the run: in a child process, one point at a time.

A thread or an alarm cannot stop a hung CUDA call, and a crash in a user's extension would take
the stage down with it, so each contender's points go to a child process of the stage's job
(`python -m minimodel.contenders.run`: a fresh interpreter with the parent's environment, so
Triton's interpreter switch carries over; not `multiprocessing`, whose spawn re-runs the parent's
main script, here the rule's). Requests and answers cross two pipes as plain pickles (a tensor
by value: multiprocessing's own pickler would share its memory, which needs a related process).
The parent waits at most the contender's `timeout_s` for each point; a point that outlasts it, or
a child that dies, gives a failed row saying so, and a fresh child takes the next point. Every
other contender's numbers come from their own children.

The child's stdout and stderr, and those of any process it starts, are appended to the rule's
log (`log`, by default the one `provenance.manifest.stage` names in MINIMODEL_RULE_LOG), never
the console: a contender that prints a line per call would drown the stage's progress. The
console gets one line per contender that failed, naming that log (`failure_line`).

Inputs are drawn in the child from a seed (`inputs`), so the parent draws the very same ones for
its float64 reference without sending tensors across.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from minimodel.contenders import timed
from minimodel.contenders.catalog import Where
from minimodel.contenders.spec import Contender, ContenderError, load, prepared
from minimodel.contenders.timed import ContenderOutputError, validated
from minimodel.floor import contract
from minimodel.floor.provenance.project import RULE_LOG_ENV, SRC
from minimodel.floor.subprocesses import die_with_parent


@dataclass(frozen=True)
class Case:
    """One correctness point: shape, mode, dtype, device, layout and the seed of its inputs."""

    B: int
    H: int
    H_kv: int
    N: int
    d: int
    causal: bool
    dtype: str
    device: str
    seed: int
    layout: str = "contiguous"  # or "bnhd": a transposed view of (B, N, H, d)

    @property
    def where(self) -> Where:
        """The case as `catalog.runs_at` asks about it: on the CPU, the kernel runs under Triton's
        interpreter."""
        return Where(self.d, self.causal, self.dtype, self.device, grouped=self.H_kv != self.H,
                     interpreted=self.device == "cpu")


def inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V of a case, the same in every process: drawn on the CPU from the case's seed."""
    return _draw(case, 3)


def backward_inputs(case: Case) -> tuple[torch.Tensor, ...]:
    """Q, K, V (those of `inputs`) and the output gradient dO, drawn after them from the same seed."""
    return _draw(case, 4)


def _draw(case: Case, count: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(case.seed)
    tdtype = getattr(torch, case.dtype)

    def rand(heads):
        if case.layout == "bnhd":
            x = torch.randn(case.B, case.N, heads, case.d, generator=gen)
            return x.to(case.device, tdtype).transpose(1, 2)
        return torch.randn(case.B, heads, case.N, case.d, generator=gen).to(case.device, tdtype)

    return (rand(case.H), rand(case.H_kv), rand(case.H_kv), rand(case.H))[:count]


def checked_output(fn, case: Case) -> torch.Tensor:
    """The contender's output for a case, on the CPU; a wrong shape or dtype raises, naming both.

    On a GPU the caching allocator is first handed a NaN-filled block of the output's size, so an
    element the contender did not write shows up as NaN.
    """
    q, k, v = inputs(case)
    args = prepared(fn, q, k, v)
    if case.device == "cuda":
        poison = torch.full_like(q, float("nan"))
        del poison
    out = validated(fn(*args, causal=case.causal), q)
    if case.device == "cuda":
        torch.cuda.synchronize()
    return out.detach().cpu()


def checked_grads(fn, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of the contender at a case by autograd, at the dO of `backward_inputs`, on the CPU.
    An output autograd cannot differentiate (detached, say) raises, saying so."""
    q, k, v, do = backward_inputs(case)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    args = prepared(fn, *leaves)  # through autograd: the gradients come back in (B, H, N, d)
    if case.device == "cuda":
        poison = torch.full_like(q, float("nan"))
        del poison
    out = validated(fn(*args, causal=case.causal), q)
    if not out.requires_grad:
        raise TypeError("its output does not require grad: autograd cannot differentiate it")
    grads = torch.autograd.grad(out, leaves, do, allow_unused=True)
    missing = [name for name, g in zip("QKV", grads, strict=True) if g is None]
    if missing:
        raise TypeError(f"its output does not depend on {', '.join(missing)} through autograd")
    if case.device == "cuda":
        torch.cuda.synchronize()
    return tuple(g.detach().cpu() for g in grads)


TASKS = {"output": checked_output, "grads": checked_grads, **timed.TASKS}


def _send(conn: Connection, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))


def _receive(conn: Connection):
    return pickle.loads(conn.recv_bytes())


# Child.call's status for a point the contender declined by raising NotImplementedError
SKIPPED = contract.SKIPPED


def declined(err: NotImplementedError) -> str:
    """Why a contender declined a point: its NotImplementedError's message, on one line."""
    return str(err).splitlines()[0] if str(err) else "the contender does not implement this case"


def one_line(err: Exception) -> str:
    """An error as one line: its type and the first line of its message."""
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def where(err: Exception) -> str:
    """" (file:line)" of the innermost frame outside this project's package, where the contender's
    own code raised; "" for what the project's own checks found wrong with its output (their
    message says what)."""
    if isinstance(err, ContenderOutputError):
        return ""
    outside = [f for f in traceback.extract_tb(err.__traceback__)
               if not Path(f.filename).resolve().is_relative_to(SRC / "minimodel")]
    return f" ({Path(outside[-1].filename).name}:{outside[-1].lineno})" if outside else ""


def _cuda_usable() -> bool:
    if not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # an illegal address, a device-side assert, ...
        return False


def _serve(conn_in: Connection, conn_out: Connection) -> None:
    """The child: load the contender it is sent, then answer (task, payload) until the pipe closes."""
    contender, search = _receive(conn_in)
    try:
        fn = load(contender, search)
    except Exception as err:  # a user's module may raise anything on import
        # a ContenderError already names the file and line; anything else is named by its type
        _send(conn_out, ("error", str(err) if isinstance(err, ContenderError)
                         else f"{type(err).__name__}: {err}"))
        return
    _send(conn_out, ("ready", None))
    while True:
        try:
            task, payload = _receive(conn_in)
        except EOFError:
            return
        try:
            _send(conn_out, (contract.OK, TASKS[task](fn, payload)))
        except NotImplementedError as err:  # the contender declines this point: a skipped row
            _send(conn_out, (SKIPPED, declined(err)))
        except Exception as err:  # a user's function may raise anything
            traceback.print_exc()  # the whole traceback, in the log the console line names
            _send(conn_out, ("error", one_line(err) + where(err)))
            if not _cuda_usable():  # a sticky CUDA error would fail every later point: start afresh
                return
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # the next point, and the stage's own timings, get the memory


def rule_log(log: str | os.PathLike | None = None) -> str | None:
    """Where a contender's output goes: `log`, else the log of the rule this process runs
    (MINIMODEL_RULE_LOG, set by `stage()`); None outside a rule: this process's own stdout/stderr."""
    return str(log) if log else os.environ.get(RULE_LOG_ENV) or None


def failure_line(name: str, failed: list[str], ran: int, log: str | None, what: str = "points") -> str | None:
    """The console's one line for a contender with failed points (`failed`: their reasons)."""
    if not failed:
        return None
    where = f"its output is in {log}" if log else "its output went to this process's stderr"
    return f"contender {name}: {len(failed)} of {ran} {what} failed (first: {failed[0]}); {where}"


class Child:
    """A contender's child process; `call` restarts it after a hang or a death. Its output is
    appended to `log` (`rule_log`)."""

    def __init__(self, contender: Contender, search: tuple[Path, ...], log: str | os.PathLike | None = None):
        self.contender, self.search = contender, search
        self.log = rule_log(log)
        self.process = self.to_child = self.from_child = None
        self.load_error: str | None = None

    def _start(self) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        src = str(SRC)  # this checkout's minimodel, first
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        # -P: the working directory is not put on sys.path, so the child finds the same module file
        # the workflow hashed (PYTHONPATH, then examples/)
        command = [sys.executable, "-P", "-m", "minimodel.contenders.run", str(down_r), str(up_w)]
        output = open(self.log, "a") if self.log else None  # the child holds it
        try:
            if output is not None:
                output.write(f"--- contender {self.contender.name} ({self.contender.fn}): "
                             "its process's output follows ---\n")
                output.flush()
            # killed with the stage, even in the middle of a contender's call
            self.process = subprocess.Popen(command, pass_fds=(down_r, up_w), env=env,
                                            preexec_fn=die_with_parent, stdout=output,
                                            stderr=subprocess.STDOUT if output else None)
        finally:
            if output is not None:
                output.close()
        os.close(down_r)
        os.close(up_w)
        self.to_child, self.from_child = Connection(down_w, readable=False), Connection(up_r, writable=False)
        _send(self.to_child, (self.contender, tuple(self.search)))
        # importing torch and the user's module: allowed a minute on top of the point's time limit
        if not self.from_child.poll(60 + self.contender.timeout_s):
            self.stop()
            self.load_error = f"its module did not import within {60 + self.contender.timeout_s:.0f} s"
            return
        status, detail = self._recv()
        if status != "ready":
            self.stop()
            self.load_error = detail

    def _recv(self):
        try:
            return _receive(self.from_child)
        except EOFError:
            return "error", f"its process died (exit code {self._wait()})"

    def start(self) -> None:
        """Start the child now (`call` starts it when first needed): its module loads, once."""
        if self.process is None and not self.load_error:
            self._start()

    def call(self, task: str, payload):
        """(contract.OK, result), (SKIPPED, why) when the contender raised NotImplementedError, or
        ("error", one line saying what went wrong). A module that failed to load is not tried
        again: every later point gets the same reason."""
        if self.load_error:
            return "error", self.load_error
        if self.process is None or self.process.poll() is not None:
            self.stop()
            self._start()
        if self.load_error:
            return "error", self.load_error
        _send(self.to_child, (task, payload))
        if not self.from_child.poll(self.contender.timeout_s):
            self.stop()
            return "error", f"no answer within its time limit of {self.contender.timeout_s:g} s: stopped"
        status, detail = self._recv()
        if status == "error" and self.process.poll() is not None:
            self.stop()
        return status, detail

    def _wait(self) -> int | None:
        """The child's exit code, waiting a few seconds at most: a process stuck in a driver call
        may outlive SIGKILL for a while, and the stage must not wait on it."""
        try:
            return self.process.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self._wait()
            self.to_child.close()
            self.from_child.close()
        self.process = self.to_child = self.from_child = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
