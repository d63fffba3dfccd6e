# The backward is measured in the cpu_bytes_part job of each of its dtypes: one without a job
# would be left out in silence. Refused before any job.
_BACKWARD_ONLY = [
    t for t in config["cpu"]["backward"]["dtypes"] if t not in config["cpu"]["dtypes"]
]
if _BACKWARD_ONLY:
    raise SystemExit(
        f"config: cpu.backward.dtypes has {', '.join(_BACKWARD_ONLY)}, which cpu.dtypes "
        f"({', '.join(config['cpu']['dtypes'])}) lacks; accepted: dtypes of cpu.dtypes (the "
        "backward is measured in the cpu_bytes_part job of its dtype)"
    )


rule cpu_bytes_part:
    """Stage 2: measured byte traffic of the naive and tiled-flash references for one dtype, forward and backward (notes/labs.md, lab 01 C)."""
    input:
        code=code("scripts/cpu_bytes_part.py"),
    output:
        table=out(C.CPU_BYTES_PART),
        manifest=manifest_of("cpu_bytes_part"),
    log:
        logfile("cpu_bytes_part_{dtype}"),
    benchmark:
        benchfile("cpu_bytes_part_{dtype}")
    wildcard_constraints:
        dtype="float16|bfloat16|float32",
    conda:
        CONDA_ENV
    threads: 1
    params:
        cfg=config["cpu"],
        random_seed=config["random_seed"],
    script:
        "../../scripts/cpu_bytes_part.py"


rule cpu_bytes:
    """Stage 2: the byte tables of every dtype in one tidy CSV."""
    input:
        parts=expand(out(C.CPU_BYTES_PART), dtype=config["cpu"]["dtypes"]),
        code=code("scripts/cpu_bytes.py"),
    output:
        table=report(
            out(C.CPU_BYTES),
            caption="../report/table_cpu_bytes.rst",
            category="Tables",
        ),
        manifest=manifest_of("cpu_bytes"),
    log:
        logfile("cpu_bytes"),
    conda:
        CONDA_ENV
    script:
        "../../scripts/cpu_bytes.py"


rule cpu_roofline:
    """Stage 2: this machine's ceilings and the roofline speedup prediction (notes/labs.md, lab 01 E)."""
    input:
        code=code("scripts/cpu_roofline.py"),
    output:
        ceilings=out(C.CPU_CEILINGS),
        manifest=manifest_of("cpu_roofline"),
    log:
        logfile("cpu_roofline"),
    benchmark:
        benchfile("cpu_roofline")
    conda:
        CONDA_ENV
    threads: whole_machine()
    params:
        cfg=config["roofline"],
        random_seed=config["random_seed"],
        tile=[config["cpu"]["block_r"], config["cpu"]["block_c"]],
    script:
        "../../scripts/cpu_roofline.py"
