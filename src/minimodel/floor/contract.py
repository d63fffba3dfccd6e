"""What the stages hand each other, each named once: output paths, grid, status and implementation
names, and the lab's constants.

A rule (`workflow/rules/*.smk`), a figure (`report/plots.py`), the results README
(`report/results_readme.py`) and `compare` (`report/compare/`, `report/runs.py`) read the same
name from here. A new stage, figure or contender (another attention implementation timed beside
the kernel) adds its names here once; ARCHITECTURE.md says what else it touches.

"The lab" is the course material the project answers (`notes/labs.md`): lab 01, lab 02 and
theory 02.

This module imports nothing of minimodel: every layer may import it.
"""

from __future__ import annotations

# ---- the results layout, relative to results_dir --------------------------------------------
SYMBOLIC_BYTES = "symbolic/bytes.csv"  # scheme × direction × convention × N × d × tile × dtype
SYMBOLIC_FORMULAS = "symbolic/formulas.csv"  # every forward closed form, and whether it equals the lab's
SYMBOLIC_BACKWARD_FORMULAS = "symbolic/backward_formulas.csv"  # the backward's closed forms
SYMBOLIC_LAB_TABLE = "symbolic/lab_table.txt"  # lab 01's printed table, annotated
CPU_BYTES_PART = "cpu/bytes/{dtype}/bytes.csv"  # one dtype's measured bytes
CPU_BYTES = "cpu/bytes.csv"  # every dtype's
CPU_CEILINGS = "cpu/roofline/ceilings.json"
CORRECTNESS = "gpu/correctness/correctness.csv"
CORRECTNESS_SUMMARY = "gpu/correctness/correctness.json"
TIMING = "gpu/timing/timing.csv"
TIMING_SUMMARY = "gpu/timing/timing.json"
# every timing sample: timing.csv's key columns (TIMING_KEY), `sample` (0 … k-1, the round it was
# taken in) and `ms`; timing.csv's `ms` is their median, `samples` their k
TIMING_SAMPLES = "gpu/timing/samples.csv"
TIMING_KEY = ("direction", "grid", "B", "H", "N", "d", "causal", "impl")  # a timing row's, and its samples'
TIMING_SAMPLES_COLUMNS = (*TIMING_KEY, "sample", "ms")
# the timing stage's compiles made ahead (rule gpu_warm): one row per timing pass and implementation
# whose first call compiles, its status and seconds
WARM = "gpu/warm/warm.csv"
WARM_SUMMARY = "gpu/warm/warm.json"
GPU_BYTES = "gpu/bytes/bytes.csv"
GPU_KERNELS = "gpu/bytes/kernels.csv"
GPU_BYTES_SUMMARY = "gpu/bytes/bytes.json"
# One shard of a GPU stage (minimodel.gpu.shards): its rows and where they stand in the stage's table,
# gathered into the stage's tables above by the stage's rule; each shard's folder holds its manifest.
CORRECTNESS_SHARD = "gpu/correctness/shards/{shard}/shard.json"
TIMING_SHARD = "gpu/timing/shards/{shard}/shard.json"
GPU_BYTES_SHARD = "gpu/bytes/shards/{shard}/shard.json"
PLOTS = "plots"  # plots/<figure>.png, one per FIGURES
RESULTS_README = "README.md"
README_FOLDER = "readme"  # the README's manifest
# the HTML report's headline numbers, beside the README's manifest
REPORT_HEADLINE = f"{README_FOLDER}/headline.rst"
VERIFY = "verify/verify.txt"
COMPARE = "compare"  # comparison.csv, verdict.json, comparison.png
LOGS = "logs"  # logs/<rule>.log
BENCHMARKS = "benchmarks"  # benchmarks/<rule>.tsv
MANIFEST = "manifest.json"  # beside every output, one per folder below
# Decode (a few new tokens against a KV cache; floor/byte_model/decode.py), through every stage: its
# closed forms and its grid's model rows, the CPU's counted bytes, the GPU's checks and timings, its figures
DECODE_SYMBOLIC = "symbolic/decode/decode.csv"  # point × scheme × splits: bytes, FLOPs, intensity, bound
DECODE_FORMULAS = "symbolic/decode/formulas.csv"
DECODE_CPU = "cpu/decode/decode.csv"  # point × scheme × splits: counted bytes beside the model
DECODE_GPU = "gpu/decode/decode.csv"  # point × implementation: correctness, time, GB/s
DECODE_GPU_SUMMARY = "gpu/decode/decode.json"
DECODE_GPU_SAMPLES = "gpu/decode/samples.csv"  # every sample: the point's key columns, impl, sample, ms
DECODE_PLOTS = "plots/decode"  # plots/decode/<figure>.png, one per DECODE_FIGURES

# Each rule's folder, holding its manifest.
FOLDERS = {"symbolic": "symbolic", "cpu_bytes_part": "cpu/bytes/{dtype}", "cpu_bytes": "cpu",
           "cpu_roofline": "cpu/roofline", "gpu_correctness": "gpu/correctness",
           "gpu_warm": "gpu/warm", "gpu_timing": "gpu/timing", "gpu_bytes": "gpu/bytes", "plots": PLOTS,
           "gpu_correctness_shard": "gpu/correctness/shards/{shard}",
           "gpu_timing_shard": "gpu/timing/shards/{shard}", "gpu_bytes_shard": "gpu/bytes/shards/{shard}",
           "readme": README_FOLDER, "verify": "verify", "compare": COMPARE,
           "decode_symbolic": "symbolic/decode", "decode_cpu": "cpu/decode", "decode_gpu": "gpu/decode",
           "decode_plots": DECODE_PLOTS}


def manifest(rule: str) -> str:
    """The manifest of `rule`'s outputs, relative to results_dir."""
    return f"{FOLDERS[rule]}/{MANIFEST}"


# What a comparison reads of each run (the compare rule lists them as its inputs).
COMPARED_TABLES = (SYMBOLIC_BYTES, SYMBOLIC_FORMULAS, SYMBOLIC_BACKWARD_FORMULAS, SYMBOLIC_LAB_TABLE,
                   CPU_BYTES, CORRECTNESS, TIMING, TIMING_SUMMARY, GPU_BYTES, GPU_BYTES_SUMMARY)
# ... and what a run made before them lacks (the timing samples, decode's tables), read and checked
# where it has them.
COMPARED_OPTIONAL_TABLES = (TIMING_SAMPLES, DECODE_SYMBOLIC, DECODE_CPU, DECODE_GPU, DECODE_GPU_SUMMARY)
COMPARED_MANIFESTS = tuple(manifest(rule) for rule in
                           ("symbolic", "cpu_bytes", "cpu_roofline", "gpu_correctness", "gpu_timing",
                            "gpu_bytes"))

# Every figure of the plots rule (plots/<name>.png, caption workflow/report/<name>.rst, drawn by
# the function of that name in report/plots.py or report/backward_plots.py) and the report
# category it is shown under.
FIGURES = {
    "bytes_vs_n": "Bytes moved",
    "intensity_ratio": "Bytes moved",
    "gpu_bytes": "Bytes moved",
    "roofline": "Roofline",
    "correctness": "GPU kernel",
    "tflops_vs_n": "GPU kernel",
    "ratio_to_backends": "GPU kernel",
    "lab_speedup": "GPU kernel",
    "backward_bytes_vs_n": "Backward",
    "backward_tflops_vs_n": "Backward",
}

# Decode's figures (rule decode_plots, drawn by report/decode_plots.py), as FIGURES.
DECODE_FIGURES = {"decode_bytes": "Decode", "decode_bandwidth": "Decode"}

# ---- names inside the tables -----------------------------------------------------------------
# The timing grids (timing.csv's `grid`): lab 02's, and FlashAttention's benchmark grid.
LAB_GRID = "lab"
FLASHATTENTION_GRID = "flashattention"
GRIDS = (LAB_GRID, FLASHATTENTION_GRID)
# The byte model's conventions for the write of O (symbolic/bytes.csv's `convention`): the lab's
# formulas as written, or O left out of both schemes.
LAB_CONVENTION = "lab"
CONSISTENT_CONVENTION = "consistent"
CONVENTIONS = (LAB_CONVENTION, CONSISTENT_CONVENTION)
# The passes a row counts (`direction` in symbolic/bytes.csv, cpu/bytes.csv, correctness.csv and
# timing.csv): the forward alone, the gradient pass alone, the two together (correctness.csv has no
# fwd+bwd rows: its backward rows check the gradients). A table without the column (a run made before the
# backward) is all forward: `forward_rows`.
FORWARD, BACKWARD, FWD_BWD = "forward", "backward", "fwd+bwd"
DIRECTIONS = (FORWARD, BACKWARD, FWD_BWD)
# How the flash backward accumulates dQ (`dq_accumulation`; empty where no dQ is accumulated over
# K/V tiles): the dQ tile read, updated and written back in slow memory once per K/V tile (the
# tiled CPU reference), a pass of its own over Q tiles (a dK/dV kernel and a dQ kernel), or added
# inside the dK/dV kernel into an accumulator that every K/V tile of a head reaches while it is in
# the L2 (the Gluon kernel's in-kernel dQ on Hopper, cuDNN's).
DQ_READ_MODIFY_WRITE, DQ_SEPARATE_PASS, DQ_IN_L2 = "read-modify-write", "separate pass", "reduced in the L2"
DQ_ACCUMULATIONS = (DQ_READ_MODIFY_WRITE, DQ_SEPARATE_PASS, DQ_IN_L2)
# The correctness sweep's groups of cases (correctness.csv's `group`).
LAB_CASES, AWKWARD_CASES, HEAD_DIM_CASES = "lab grid", "awkward N", "head dim"
GQA_CASES = "grouped heads"  # K and V with fewer heads than Q

# The implementations timed (timing.csv's `impl`): this project's kernel, naive PyTorch, and
# PyTorch's SDPA backends (name -> torch.nn.attention.SDPBackend member).
TRITON = "triton"
NAIVE = "naive"
SDPA_BACKENDS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
}
SDPA_FLASH, SDPA_EFFICIENT, SDPA_CUDNN = SDPA_BACKENDS
IMPLEMENTATIONS = (TRITON, NAIVE, *SDPA_BACKENDS)
# Built-in contenders beyond those (minimodel.contenders.builtin): the kernel forced onto its tl
# path, FlexAttention, the flash_attn package (FlashAttention-2) and FlashAttention-4
# (`flash_attn.cute`, pip's flash-attn-4). A user's contender is named by the config.
TRITON_TL, FLEX, FLASH_ATTN, FA4 = "triton_tl", "flex", "flash_attn", "fa4"
# The decode kernel held to one split (no combine), timed beside it: what its split-KV buys
# (gpu/decode/decode.csv's `impl`).
TRITON_ONE_SPLIT = "triton_one_split"
# What each grid times, in this order.
IMPLEMENTATIONS_BY_GRID = {LAB_GRID: [TRITON, NAIVE, *SDPA_BACKENDS],
                           FLASHATTENTION_GRID: [TRITON, *SDPA_BACKENDS, NAIVE]}
# The byte model's schemes that the GPU's DRAM bytes are set beside (gpu/bytes/bytes.csv's `impl`).
NAIVE_SCHEME, FLASH_SCHEME = "naive", "flash"
# Decode's flash scheme (symbolic/decode.csv's `scheme`, beside NAIVE_SCHEME): the KV cache cut into
# splits read by programs of their own, their partial outputs merged by a combine step.
SPLIT_KV_SCHEME = "split-kv"
# The byte model's naive attention with its softmax in fp32, half precision only (symbolic/bytes.csv's
# `scheme`, beside the two above).
NAIVE_FP32_SOFTMAX_SCHEME = "naive_fp32_softmax"
BYTES_SCHEMES = (NAIVE_SCHEME, FLASH_SCHEME)
# Its points' regimes (gpu/bytes/bytes.csv's `regime`): Q, K, V and O fit in the L2, or not.
BYTES_REGIMES = ("one head", "many heads")

# Status words. timing.csv: `OK`, else why not. gpu/bytes/bytes.csv: `MEASURED`, else a sentence
# that starts with `NOT_MEASURED` (nothing could be measured) or `SKIPPED` (this point was not).
OK = "ok"
MEASURED = "measured"
NOT_MEASURED = "not measured"
SKIPPED = "skipped"
# The first word(s) of a timing or correctness row's status when the implementation did not give a
# time or an answer (each followed by ": why", but for OUT_OF_MEMORY and FAILED_CHECK).
FAILED = "failed"
FAILED_CHECK = "failed its correctness check"
OUT_OF_MEMORY = "out of memory"
UNSUPPORTED = "unsupported"
NO_GPU_TIMING = "no CUDA device on this machine: GPU timing was not possible"
NO_GPU_WARM = "no CUDA device on this machine: nothing was compiled ahead of the timing stage"
# Why bfloat16 is skipped under Triton's CPU interpreter: the kernel's cases, a Triton contender's.
BF16_INTERPRETER_REASON = "tl.dot on bf16 operands is wrong under Triton's interpreter (3.6)"

# ---- the lab's constants ---------------------------------------------------------------------
# The tile the lab asks its questions with (theory 02 and lab 01: B_r = B_c = 64).
LAB_TILE = (64, 64)
# (N, d) of lab 01's printed table, in its dtype (the lab's dtype_bytes = 2).
LAB_TABLE_POINTS = ((64, 64), (1024, 64), (2048, 64), (4096, 64), (8192, 128), (32768, 128))
LAB_DTYPE = "float16"


# ---- reading the tables --------------------------------------------------------------------
def forward_rows(frame):
    """The forward's rows of a table: `direction` == FORWARD, or every row of a table without the
    column (a run made before the backward)."""
    if "direction" not in frame.columns:
        return frame
    return frame[frame["direction"] == FORWARD]


def with_direction(frame):
    """A copy of a table whose every row has a `direction` (FORWARD where the table has no column,
    or an empty cell) and a `dq_accumulation` ("" where none: the forward's and naive's rows)."""
    frame = frame.copy()
    frame["direction"] = frame["direction"].fillna(FORWARD) if "direction" in frame.columns else FORWARD
    frame["dq_accumulation"] = (frame["dq_accumulation"].fillna("") if "dq_accumulation" in frame.columns
                                else "")
    return frame
