rule verify:
    """Re-hash every manifest's outputs and inputs; fails naming anything that changed."""
    input:
        manifests=[
            rules.symbolic.output.manifest,
            rules.cpu_bytes.output.manifest,
            rules.cpu_roofline.output.manifest,
            rules.gpu_correctness.output.manifest,
            rules.gpu_timing.output.manifest,
        ],
        code=code("scripts/verify.py"),
    output:
        report=out("verify", "verify.txt"),
        manifest=out("verify", "manifest.json"),
    log:
        logfile("verify"),
    conda:
        CONDA_ENV
    script:
        "../../scripts/verify.py"
