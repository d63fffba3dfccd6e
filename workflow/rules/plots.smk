rule plots:
    """Stage 4: every figure from the result tables; GPU figures say so when there was no GPU."""
    input:
        symbolic=rules.symbolic.output.table,
        cpu_bytes=rules.cpu_bytes.output.table,
        cpu_ceilings=rules.cpu_roofline.output.ceilings,
        correctness=rules.gpu_correctness.output.table,
        timing_table=rules.gpu_timing.output.table,
        timing=rules.gpu_timing.output.summary,
        gpu_bytes=rules.gpu_bytes.output.table,
        gpu_bytes_summary=rules.gpu_bytes.output.summary,
        code=code("scripts/plots.py"),
    output:
        **{
            name: report(
                out(C.PLOTS, f"{name}.png"),
                caption=f"../report/{name}.rst",
                category=category,
            )
            for name, category in C.FIGURES.items()
        },
        manifest=manifest_of("plots"),
    log:
        logfile("plots"),
    conda:
        CONDA_ENV
    params:
        # the tile of the intensity-ratio figure: the first of the symbolic table's tiles
        tile=config["symbolic"]["tiles"][0],
    script:
        "../../scripts/plots.py"
