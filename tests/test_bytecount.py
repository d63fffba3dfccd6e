import contextlib
import io
import os

import pytest
import torch
from conftest import snakemake_until

from minimodel.cpu import bytecount, slow_memory
from minimodel.cpu.references import attn_flash_reference_cpu
from minimodel.floor.attention_ref import attn_naive
from minimodel.floor.byte_model.forward import DTYPE_BYTES, model_bytes
from minimodel.floor.contract import CONSISTENT_CONVENTION, NAIVE_FP32_SOFTMAX_SCHEME


def test_counter_counts_a_known_sequence_of_ops():
    budget = 1024
    x = torch.randn(64, 64)  # 16 KiB: resident in slow memory
    small = torch.randn(8, 8)  # 256 B: on chip

    def ops(x):
        y = x * 2  # R 16 KiB, W 16 KiB (result too large for the budget)
        tile = x[:8, :8].clone()  # R 256 B (a view's elements), W nothing: fits on chip
        t2 = tile @ small  # on chip: free
        x[8:16, :8].copy_(t2)  # W 256 B, copy_ does not read its destination
        z = y.t()  # a view moves nothing
        return z.sum()  # R 16 KiB, W 4 B result on chip

    counter = slow_memory.ByteCounter(budget)
    ops(counter.wrap(x))
    kib16 = 64 * 64 * 4
    assert counter.reads == kib16 + 256 + kib16
    assert counter.writes == kib16 + 256
    assert counter.per_op["mul"] == [1, kib16, kib16]
    assert counter.per_op["copy_"] == [1, 0, 256]
    assert counter.per_op["t"] == [1, 0, 0]


def test_baddbmm_with_beta_zero_reads_no_input_matrix():
    counter = slow_memory.ByteCounter(0)
    a, b = counter.wrap(torch.randn(1, 4, 8)), counter.wrap(torch.randn(1, 8, 4))
    c = counter.wrap(torch.randn(1, 4, 4))
    torch.baddbmm(c, a, b, beta=0.0)
    assert counter.reads == (32 + 32) * 4 and counter.writes == 16 * 4
    torch.baddbmm(c, a, b, beta=1.0)
    assert counter.reads == (32 + 32) * 4 + (16 + 32 + 32) * 4


@pytest.mark.parametrize("n", [128, 256, 512])
@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_naive_count_equals_closed_form_exactly(n, d, dtype):
    row = bytecount.measure("naive", n, d, dtype, sram_bytes=1024)
    assert row["bytes_instrumented"] == row["bytes_model"]
    assert row["model_scheme"] == ("naive" if dtype == "float32" else "naive_fp32_softmax")


@pytest.mark.parametrize("n", [64, 256, 512])
@pytest.mark.parametrize("tile", [(64, 64), (32, 16)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_flash_count_equals_closed_form_when_n_divides(n, tile, dtype):
    row = bytecount.measure("flash", n, 64, dtype, *tile, sram_bytes=64 * 1024)
    assert row["bytes_instrumented"] == row["bytes_model"]
    assert row["o_write_bytes"] == n * 64 * DTYPE_BYTES[dtype]


def test_flash_tail_tiles_are_counted_as_read():
    # N=100 with B_r=64: 2 query tiles, each reading all of K and V: 2·2·N·d elements
    row = bytecount.measure("flash", 100, 32, "float32", 64, 64)
    assert row["bytes_instrumented"] == (100 * 32 + 2 * 2 * 100 * 32) * 4
    assert row["deviation"] == pytest.approx((2 * 2 - 2 * 100 / 64) / (1 + 2 * 100 / 64))


def test_on_chip_budget_decides_what_counts():
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(256, 64, generator=gen) for _ in range(3))
    tiny = slow_memory.count_bytes(lambda q, k, v: attn_flash_reference_cpu(q, k, v), (Q, K, V), 0)
    roomy = slow_memory.count_bytes(lambda q, k, v: attn_flash_reference_cpu(q, k, v), (Q, K, V))
    assert tiny["bytes"] > roomy["bytes"]  # with no SRAM every tile intermediate is traffic
    # the measured run computes the same attention
    torch.testing.assert_close(roomy["result"], attn_naive(Q, K, V))


def test_profiler_sees_allocations_not_the_model():
    row = bytecount.measure("naive", 256, 64, "float32", with_profiler=True)
    assert row["bytes_profiler"] > 0 and row["profiler_input_bytes"] > 0
    # it sees the writes of S, P and O, not the reads: under the model's total
    assert row["bytes_profiler"] < row["bytes_model"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="accepted: naive, flash"):
        bytecount.measure("blocked", 64, 64, "float32")
    with pytest.raises(ValueError, match="accepted: float16"):
        bytecount.measure("naive", 64, 64, "int8")
    with pytest.raises(ValueError, match="sram_bytes"):
        slow_memory.ByteCounter(-1)


def test_a_reused_address_does_not_carry_an_earlier_storages_writes(monkeypatch):
    # The allocator hands a freed block to the next allocation: storages are told apart by
    # address, so a count must start afresh with each allocation. Every storage at one address
    # is the extreme case: the result must still own only its own write.
    monkeypatch.setattr(slow_memory, "_storage_key", lambda t: 0)

    def fn(x):
        big = x @ x.T  # 256 KiB in slow memory, then freed
        del big
        return x * 2  # 64 KiB, slow memory: the output whose write is split off

    counted = slow_memory.count_bytes(fn, [torch.randn(256, 64)], 1024)
    assert counted["o_write"] == 256 * 64 * 4


def test_an_on_chip_result_owns_no_slow_memory_write():
    counter = slow_memory.ByteCounter(1024)
    x = counter.wrap(torch.randn(256, 64))
    big = x @ x.T  # slow memory: its writes are recorded at its storage's address
    on_chip = big.elem.view(-1)[:8]  # a plain tensor at that same address, as a reused block is
    assert counter.writes_to(big) == 256 * 256 * 4 and counter.writes_to(on_chip) == 0


def test_the_naive_counts_repeat_from_run_to_run():
    first = [bytecount.measure("naive", 256, 64, "float16")["bytes_instrumented"] for _ in range(10)]
    assert set(first) == {model_bytes(NAIVE_FP32_SOFTMAX_SCHEME, 256, 64, 64, 64, 2, CONSISTENT_CONVENTION)}


def test_native_stderr_goes_where_python_stderr_goes(capfd):
    log = io.StringIO()  # the rule's log, as stage() redirects sys.stderr
    with contextlib.redirect_stderr(log), bytecount.native_stderr_to_python():
        os.write(2, b"written by C++ on fd 2\n")
    assert capfd.readouterr().err == ""
    assert log.getvalue() == "written by C++ on fd 2\n"


def test_the_profilers_usdt_lines_stay_off_the_terminal_and_out_of_the_log(capfd):
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        bytecount.measure("flash", 64, 16, "float32", with_profiler=True)
        with bytecount.native_stderr_to_python():
            os.write(2, b"USDT:2026-12-01 12:17:41 7816:7816 SyncActivityProfilerHandler.cpp:52] "
                        b"profiler_start\nERROR: kept\n")
    assert "USDT" not in capfd.readouterr().err
    assert "USDT" not in log.getvalue() and log.getvalue() == "ERROR: kept\n"


def test_the_progress_bar_names_its_dtype():
    bar = io.StringIO()
    bytecount.sweep([64], [16], ["bfloat16"], progress=bar)
    assert "cpu bytes bfloat16" in bar.getvalue()


@pytest.mark.workflow
@pytest.mark.workflow
def test_cpu_bytes_part_jobs_keep_the_console_clean(tmp_path):
    """The two cpu_bytes_part jobs of the tiny config, each running the profiler, as a user runs
    them: the session's shared run, whose console holds theirs."""
    root, proc = snakemake_until(tmp_path, "cpu_bytes_part")
    said = proc.stdout + proc.stderr
    assert "USDT" not in said
    for dtype in ("float32", "float16"):
        assert f"cpu bytes {dtype}" in said
        # the profiler's start and stop lines are in the rule's log neither (tiny config:
        # profiler_max_n 256, so it ran), and its bar is whole lines there
        text = (root / "results" / "logs" / f"cpu_bytes_part_{dtype}.log").read_text()
        assert "USDT" not in text and "\r" not in text and f"cpu bytes {dtype}" in text
