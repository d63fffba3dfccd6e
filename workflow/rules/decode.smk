# Decode: a few new query tokens against a KV cache (src/minimodel/floor/byte_model/decode.py), through
# every stage, in folders of its own beside each stage's (contract.DECODE_*).


rule decode_symbolic:
    """Stage 1: decode's closed-form bytes, FLOPs, intensity and bandwidth bound on the decode grid."""
    input:
        code=code("scripts/decode_symbolic.py"),
    output:
        table=report(
            out(C.DECODE_SYMBOLIC),
            caption="../report/table_decode_symbolic.rst",
            category="Tables",
        ),
        formulas=out(C.DECODE_FORMULAS),
        manifest=manifest_of("decode_symbolic"),
    log:
        logfile("decode_symbolic"),
    conda:
        CONDA_ENV
    params:
        cfg=config["decode"],
    script:
        "../../scripts/decode_symbolic.py"


rule decode_cpu:
    """Stage 2: the counted bytes of the naive decode and the split-KV reference beside the model."""
    input:
        code=code("scripts/decode_cpu.py"),
    output:
        table=report(
            out(C.DECODE_CPU),
            caption="../report/table_decode_cpu.rst",
            category="Tables",
        ),
        manifest=manifest_of("decode_cpu"),
    log:
        logfile("decode_cpu"),
    benchmark:
        benchfile("decode_cpu")
    conda:
        CONDA_ENV
    threads: 1
    params:
        cfg=config["decode"],
        # the CPU stage's on-chip budget and torch threads, as its forward's
        cpu={k: config["cpu"][k] for k in ("sram_bytes", "threads")},
        random_seed=config["random_seed"],
    script:
        "../../scripts/decode_cpu.py"


rule decode_gpu:
    """Stage 3: decode checked against float64 and timed (GB/s beside the copy bandwidth) on the GPU."""
    input:
        # the copy bandwidth of the machine, measured by the timing stage, after which this one runs
        timing=rules.gpu_timing.output.summary,
        code=code("scripts/decode_gpu.py"),
    output:
        table=report(
            out(C.DECODE_GPU),
            caption="../report/table_decode_gpu.rst",
            category="Tables",
        ),
        samples=out(C.DECODE_GPU_SAMPLES),
        summary=out(C.DECODE_GPU_SUMMARY),
        manifest=manifest_of("decode_gpu"),
    log:
        logfile("decode_gpu"),
    benchmark:
        benchfile("decode_gpu")
    conda:
        CONDA_ENV
    # a measuring GPU job, as gpu_timing_shard: a GPU of its own (scripts/decode_gpu.py claims it)
    # and the cores shared among the K GPUs of a local run
    threads: per_gpu()
    resources:
        gpu=1,
        gpu_measure=1,
    params:
        cfg=config["decode"]["gpu"],
        max_cache_bytes=config["decode"]["max_cache_bytes"],
        # the timing stage's sample length and warm-up, as its samples'
        timing={
            k: config["gpu"]["timing"][k] for k in ("sample_ms", "sample_warmup_ms")
        },
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
    script:
        "../../scripts/decode_gpu.py"


rule decode_plots:
    """Stage 4: decode's figures: the model's bytes and bound (stage 1), GB/s beside the copy bandwidth (stage 3)."""
    input:
        symbolic=rules.decode_symbolic.output.table,
        gpu=rules.decode_gpu.output.table,
        gpu_summary=rules.decode_gpu.output.summary,
        code=code("scripts/decode_plots.py"),
    output:
        **{
            name: report(
                out(C.DECODE_PLOTS, f"{name}.png"),
                caption=f"../report/{name}.rst",
                category=category,
            )
            for name, category in C.DECODE_FIGURES.items()
        },
        manifest=manifest_of("decode_plots"),
    log:
        logfile("decode_plots"),
    conda:
        CONDA_ENV
    params:
        bandwidth=config["decode"]["bandwidth_bytes_per_s"],
    script:
        "../../scripts/decode_plots.py"
