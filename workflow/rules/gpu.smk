# workflow/profiles/slurm given as --profile: Snakemake then also loads the local
# workflow/profiles/default, and its `cores: all` and `resources: [gpu=1]` would give gpu_timing
# the submitting host's cores and submit the GPU jobs one at a time. Refused before any job.
if (
    "slurm_partition"
    in workflow.resource_settings.overwrite_resources.get("gpu_timing", {})
    and "gpu" in workflow.global_resources
    and not workflow.remote_exec
):
    raise SystemExit(
        "workflow/profiles/slurm came with --profile, so Snakemake also loaded "
        "workflow/profiles/default (cores: all, resources: gpu=1): gpu_timing would get "
        f"{workflow.global_resources['_cores'].value} CPUs instead of its set-threads, and the "
        "GPU jobs would run one after another. Run `snakemake --workflow-profile "
        "workflow/profiles/slurm`, or add `--workflow-profile none`."
    )

# A --resources of the user's own replaces the default profile's list: with `gpu` but without
# `gpu_measure`, gpu_warm could run beside gpu_timing or gpu_bytes and land in their numbers.
if (
    "gpu" in workflow.global_resources
    and "gpu_measure" not in workflow.global_resources
    and not workflow.remote_exec
):
    raise SystemExit(
        "--resources limits gpu but not gpu_measure: gpu_warm could then run beside gpu_timing "
        "or gpu_bytes, and its kernels would land in their numbers. Give both: "
        "--resources gpu=1 gpu_measure=1 (workflow/profiles/default's)."
    )


rule gpu_correctness:
    """Stage 3: the Triton kernel against a float64 reference (notes/labs.md, lab 02 D); interpreter without CUDA."""
    input:
        code=code("scripts/gpu_correctness.py"),
        contenders=contender_modules("correctness"),
    output:
        table=report(
            out(C.CORRECTNESS),
            caption="../report/table_correctness.rst",
            category="Tables",
        ),
        summary=out(C.CORRECTNESS_SUMMARY),
        manifest=manifest_of("gpu_correctness"),
    log:
        # logs outlive a failed job: the table is kept there too, so a failing sweep shows every case
        text=logfile("gpu_correctness"),
        table=out(C.LOGS, "gpu_correctness.csv"),
    benchmark:
        benchfile("gpu_correctness")
    conda:
        CONDA_ENV
    resources:
        gpu=1,
    params:
        cfg=config["gpu"]["correctness"],
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("correctness"),
        contender_packages=contender_packages("correctness"),
    script:
        "../../scripts/gpu_correctness.py"


rule gpu_warm:
    """Stage 3: the timing stage's first calls made ahead, beside gpu_correctness: its compiles fill the machine's caches (minimodel.gpu.warm)."""
    input:
        code=code("scripts/gpu_warm.py"),
        contenders=contender_modules("timing"),
    output:
        table=out(C.WARM),
        summary=out(C.WARM_SUMMARY),
        manifest=manifest_of("gpu_warm"),
    log:
        logfile("gpu_warm"),
    benchmark:
        benchfile("gpu_warm")
    conda:
        CONDA_ENV
    # not `gpu`: it runs beside gpu_correctness, which measures nothing; `gpu_measure`: never
    # beside gpu_timing or gpu_bytes, whose numbers its kernels would land in
    resources:
        gpu_measure=1,
    params:
        cfg=config["gpu"]["timing"],
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("timing"),
        contender_packages=contender_packages("timing"),
    script:
        "../../scripts/gpu_warm.py"


rule gpu_timing:
    """Stage 3: the kernel timed against naive and SDPA's backends (notes/labs.md, lab 02 E); says so without CUDA."""
    input:
        cpu_ceilings=rules.cpu_roofline.output.ceilings,
        correctness=rules.gpu_correctness.output.summary,
        # run after gpu_warm, which fills the caches its first calls read; not data it is made
        # from, so its manifest leaves it out (minimodel.floor.provenance.manifest: `after`)
        after=rules.gpu_warm.output.summary,
        code=code("scripts/gpu_timing.py"),
        contenders=contender_modules("timing"),
    output:
        table=report(
            out(C.TIMING),
            caption="../report/table_timing.rst",
            category="Tables",
        ),
        summary=out(C.TIMING_SUMMARY),
        samples=out(C.TIMING_SAMPLES),
        manifest=manifest_of("gpu_timing"),
    log:
        logfile("gpu_timing"),
    benchmark:
        benchfile("gpu_timing")
    conda:
        CONDA_ENV
    threads: whole_machine()
    resources:
        gpu=1,
        gpu_measure=1,
    params:
        cfg=config["gpu"]["timing"],
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("timing"),
        contender_packages=contender_packages("timing"),
    script:
        "../../scripts/gpu_timing.py"


rule gpu_bytes:
    """Stage 3: the GPU's DRAM bytes (Nsight Compute) of naive, the kernel and contenders beside the model; planned points without ncu."""
    input:
        code=code("scripts/gpu_bytes.py"),
        contenders=contender_modules("bytes"),
    output:
        table=report(
            out(C.GPU_BYTES),
            caption="../report/table_gpu_bytes.rst",
            category="Tables",
        ),
        kernels=out(C.GPU_KERNELS),
        summary=out(C.GPU_BYTES_SUMMARY),
        manifest=manifest_of("gpu_bytes"),
    log:
        logfile("gpu_bytes"),
    benchmark:
        benchfile("gpu_bytes")
    conda:
        CONDA_ENV
    resources:
        gpu=1,
        gpu_measure=1,
    params:
        cfg=config["gpu"]["bytes"],
        l2_bytes=config["symbolic"]["l2_bytes"],
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("bytes"),
        contender_packages=contender_packages("bytes"),
    script:
        "../../scripts/gpu_bytes.py"
