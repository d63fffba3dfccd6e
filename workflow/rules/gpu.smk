rule gpu_correctness:
    """Stage 3: the Triton kernel against a float64 reference (lab 02 D); interpreter without CUDA."""
    input:
        code=code("scripts/gpu_correctness.py"),
    output:
        table=out("gpu", "correctness", "correctness.csv"),
        summary=out("gpu", "correctness", "correctness.json"),
        manifest=out("gpu", "correctness", "manifest.json"),
    params:
        cfg=config["gpu"]["correctness"],
    resources:
        gpu=1,
    log:
        logfile("gpu_correctness"),
    benchmark:
        benchfile("gpu_correctness")
    script:
        "../../scripts/gpu_correctness.py"
