rule symbolic:
    """Stage 1: closed-form HBM bytes, FLOPs and intensity of naive vs flash, forward and backward (notes/labs.md, lab 01 A-B; notes/backward.md)."""
    input:
        code=code("scripts/symbolic.py"),
    output:
        table=report(
            out(C.SYMBOLIC_BYTES),
            caption="../report/table_symbolic.rst",
            category="Tables",
        ),
        formulas=out(C.SYMBOLIC_FORMULAS),
        backward_formulas=out(C.SYMBOLIC_BACKWARD_FORMULAS),
        lab_table=out(C.SYMBOLIC_LAB_TABLE),
        manifest=manifest_of("symbolic"),
    log:
        logfile("symbolic"),
    benchmark:
        benchfile("symbolic")
    conda:
        CONDA_ENV
    params:
        cfg=config["symbolic"],
    script:
        "../../scripts/symbolic.py"
