rule readme:
    """Stage 4: the labs' questions answered in a README filled from this run's results."""
    input:
        template="workflow/report/README.md.j2",
        headline_template="workflow/report/headline.rst.j2",
        symbolic=rules.symbolic.output.table,
        cpu_bytes=rules.cpu_bytes.output.table,
        cpu_ceilings=rules.cpu_roofline.output.ceilings,
        correctness=rules.gpu_correctness.output.summary,
        timing=rules.gpu_timing.output.summary,
        timing_table=rules.gpu_timing.output.table,
        gpu_bytes=rules.gpu_bytes.output.table,
        gpu_bytes_summary=rules.gpu_bytes.output.summary,
        # decode's answers (report/decode_answers.py)
        decode_symbolic=rules.decode_symbolic.output.table,
        decode_cpu=rules.decode_cpu.output.table,
        decode_gpu=rules.decode_gpu.output.table,
        decode_gpu_summary=rules.decode_gpu.output.summary,
        benchmarks=expand(
            benchfile("cpu_bytes_part_{dtype}"), dtype=config["cpu"]["dtypes"]
        )
        + [benchfile("cpu_roofline")],
        code=code("scripts/readme.py"),
    output:
        readme=report(
            out(C.RESULTS_README),
            caption="../report/results_readme.rst",
            category="Answers",
        ),
        # the report's description page (report/workflow.rst) includes it
        headline=report(
            out(C.REPORT_HEADLINE),
            caption="../report/results_headline.rst",
            category="Answers",
        ),
        manifest=manifest_of("readme"),
    log:
        logfile("readme"),
    conda:
        CONDA_ENV
    script:
        "../../scripts/readme.py"


rule verify:
    """Every manifest of the run re-hashed (minimodel.floor.provenance.verify): fails naming what is
    damaged; lists what is stale, without failing."""
    input:
        manifests=[
            rules.symbolic.output.manifest,
            rules.cpu_bytes.output.manifest,
            rules.cpu_roofline.output.manifest,
            rules.gpu_correctness.output.manifest,
            rules.gpu_warm.output.manifest,
            rules.gpu_timing.output.manifest,
            rules.gpu_bytes.output.manifest,
            rules.plots.output.manifest,
            rules.readme.output.manifest,
            rules.decode_symbolic.output.manifest,
            rules.decode_cpu.output.manifest,
            rules.decode_gpu.output.manifest,
            rules.decode_plots.output.manifest,
        ]
        + ([rules.compare.output.manifest] if COMPARE_REFERENCE else []),
        code=code("scripts/verify.py"),
    output:
        report=out(C.VERIFY),
        manifest=manifest_of("verify"),
    log:
        logfile("verify"),
    conda:
        CONDA_ENV
    params:
        # the run folder the report was written in: results_dir, from the output's own path
        results=lambda w, output: str(
            Path(output.report).parents[len(Path(C.VERIFY).parts) - 1]
        ),
    script:
        "../../scripts/verify.py"
