rule gpu_correctness:
    """Stage 3: the Triton kernel against a float64 reference (lab 02 D); interpreter without CUDA."""
    input:
        code=code("scripts/gpu_correctness.py"),
    output:
        table=out("gpu", "correctness", "correctness.csv"),
        summary=out("gpu", "correctness", "correctness.json"),
        manifest=out("gpu", "correctness", "manifest.json"),
    log:
        logfile("gpu_correctness"),
    benchmark:
        benchfile("gpu_correctness")
    conda:
        CONDA_ENV
    resources:
        gpu=1,
    params:
        cfg=config["gpu"]["correctness"],
    script:
        "../../scripts/gpu_correctness.py"
