rule compare:
    """This run against a reference run: the numbers that should travel between machines agree.
    Succeeds whatever the verdict, so that its outputs stay: rule compare_verdict fails the run.
    """
    input:
        # the tables and the manifests the comparison reads of this run: it runs after their rules
        # (and the timing samples, which a run made before them lacks: runs.OPTIONAL_TABLES)
        run=[out(name) for name in COMPARED + REFERENCE_MANIFESTS],
        # what the reference holds: one made by an older version may lack a stage, or the samples,
        # which the comparison then reports as not comparable, or judges by the wider band
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
        logfile("compare"),
    conda:
        CONDA_ENV
    params:
        reference=lambda wildcards, input: (
            os.path.commonpath(input.reference) if input.reference else None
        ),
    script:
        "../../scripts/compare.py"


rule compare_verdict:
    """Fails the run with a short message when the verdict is not agree and
    compare.fail_on_disagree is true: after compare wrote its outputs, and after verify.
    """
    input:
        verdict=rules.compare.output.verdict,
        verified=out(C.VERIFY),
    output:
        out(C.LOGS, "compare_verdict.txt"),
    log:
        logfile("compare_verdict"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        fail=config["compare"]["fail_on_disagree"],
    script:
        "../../scripts/compare_verdict.py"
