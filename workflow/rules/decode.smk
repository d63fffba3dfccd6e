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
        table=out(C.DECODE_CPU),
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
