rule compare:
    """This run against a reference run: the numbers that should travel between machines agree."""
    input:
        # the tables and the manifests the comparison reads of this run: it runs after their rules
        run=[out(name) for name in COMPARED + REFERENCE_MANIFESTS],
        # what the reference holds: one made by an older version may lack a stage, which the
        # comparison then reports as not comparable
        reference=(
            [
                str(COMPARE_REFERENCE / name)
                for name in COMPARED + REFERENCE_MANIFESTS
                if (PROJECT / COMPARE_REFERENCE / name).exists()
            ]
            if COMPARE_REFERENCE
            else []
        ),
        code=code("scripts/compare.py"),
    output:
        table=report(
            out(C.COMPARE, "comparison.csv"),
            caption="../report/table_compare.rst",
            category="Reproduction",
        ),
        verdict=out(C.COMPARE, "verdict.json"),
        figure=report(
            out(C.COMPARE, "comparison.png"),
            caption="../report/compare.rst",
            category="Reproduction",
        ),
        manifest=manifest_of("compare"),
    log:
        # kept when the comparison fails: Snakemake deletes a failed job's outputs, not its logs
        text=logfile("compare"),
        table=out(C.LOGS, "compare.csv"),
    conda:
        CONDA_ENV
    params:
        reference=lambda wildcards, input: (
            os.path.commonpath(input.reference) if input.reference else None
        ),
    script:
        "../../scripts/compare.py"
