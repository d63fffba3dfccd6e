rule symbolic:
    """Stage 1: closed-form HBM bytes, FLOPs and intensity of naive vs flash (lab 01 A-B)."""
    input:
        code=code("scripts/symbolic.py"),
    output:
        table=report(
            out("symbolic", "bytes.csv"),
            caption="../report/table_symbolic.rst",
            category="Tables",
        ),
        formulas=out("symbolic", "formulas.csv"),
        lab_table=out("symbolic", "lab_table.txt"),
        manifest=out("symbolic", "manifest.json"),
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
