# workflow/profiles/slurm given as --profile: Snakemake then also loads the local
# workflow/profiles/default, and its `cores: all` and `resources: [gpu=1]` would give gpu_timing
# the submitting host's cores and submit the GPU jobs one at a time. Refused before any job.
if (
    "slurm_partition"
    in workflow.resource_settings.overwrite_resources.get("gpu_timing_shard", {})
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


# Each GPU stage runs as shards (minimodel.gpu.shards, the config's gpu.shards), gathered by the
# stage's rule into its tables. Locally, `--resources gpu=K gpu_measure=K` runs up to K at once:
# each job claims a GPU of its own (minimodel.gpu.device_slots), handed out through these variables.
if "gpu" in workflow.global_resources and not workflow.remote_exec:
    os.environ.update(
        {
            device_slots.GPUS_VARIABLE: str(gpu_count()),
            device_slots.FOLDER_VARIABLE: str(PROJECT / ".snakemake" / "gpu-slots"),
            device_slots.NVML_CHECK: "1",
        }
    )

SHARDS = {stage: shard_plan(stage) for stage in shards.STAGES}


rule gpu_correctness_shard:
    """Stage 3: a shard of the kernel's sweep against a float64 reference (notes/labs.md, lab 02 D); interpreter without CUDA."""
    input:
        code=code("scripts/gpu_correctness_shard.py"),
        contenders=contender_modules("correctness"),
    output:
        shard=out(C.CORRECTNESS_SHARD),
        manifest=manifest_of("gpu_correctness_shard"),
    log:
        # logs outlive a failed job: the rows are kept there too, so a failing sweep shows every case
        text=logfile("gpu_correctness_shard/{shard}"),
        table=out(C.LOGS, "gpu_correctness_shard", "{shard}.csv"),
    benchmark:
        benchfile("gpu_correctness_shard/{shard}")
    wildcard_constraints:
        shard=SHARD_NAME,
    conda:
        CONDA_ENV
    resources:
        gpu=1,
    params:
        cfg=lambda w: shard_config("correctness", w.shard),
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("correctness"),
        contender_packages=contender_packages("correctness"),
    script:
        "../../scripts/gpu_correctness_shard.py"


rule gpu_correctness:
    """Stage 3: the sweep's shards gathered into its table; fails where the kernel failed a case."""
    input:
        shards=shard_outputs("correctness", C.CORRECTNESS_SHARD),
        manifests=shard_outputs("correctness", C.manifest("gpu_correctness_shard")),
        code=code("scripts/gpu_correctness.py"),
    output:
        table=report(
            out(C.CORRECTNESS),
            caption="../report/table_correctness.rst",
            category="Tables",
        ),
        summary=out(C.CORRECTNESS_SUMMARY),
        manifest=manifest_of("gpu_correctness"),
    log:
        text=logfile("gpu_correctness"),
        table=out(C.LOGS, "gpu_correctness.csv"),
    conda:
        CONDA_ENV
    params:
        random_seed=config["random_seed"],
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
    # not `gpu`: it runs beside the correctness shards, which measure nothing; `gpu_measure`:
    # never beside a timing or DRAM-bytes shard on its GPU, whose numbers its kernels would land
    # in. One job for every shard: its compiles land in the host's caches, which every shard on
    # the host reads. No shard waits for it (a warm-up run again re-runs none): it starts first
    # (`priority`), beside the sweep.
    priority: 1
    conda:
        CONDA_ENV
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


rule gpu_timing_shard:
    """Stage 3: a shard of the timing, the kernel against naive and SDPA's backends at its passes (notes/labs.md, lab 02 E); says so without CUDA."""
    input:
        code=code("scripts/gpu_timing_shard.py"),
        contenders=contender_modules("timing"),
    output:
        shard=out(C.TIMING_SHARD),
        manifest=manifest_of("gpu_timing_shard"),
    log:
        logfile("gpu_timing_shard/{shard}"),
    benchmark:
        benchfile("gpu_timing_shard/{shard}")
    wildcard_constraints:
        shard=SHARD_NAME,
    conda:
        CONDA_ENV
    threads: per_gpu()
    resources:
        gpu=1,
        gpu_measure=1,
    params:
        cfg=lambda w: shard_config("timing", w.shard),
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("timing"),
        contender_packages=contender_packages("timing"),
    script:
        "../../scripts/gpu_timing_shard.py"


rule gpu_timing:
    """Stage 3: the timing's shards gathered into its tables; refused where they ran on different GPUs or versions."""
    input:
        shards=shard_outputs("timing", C.TIMING_SHARD),
        manifests=shard_outputs("timing", C.manifest("gpu_timing_shard")),
        # no timing shard waits for the sweep (on K GPUs they run beside it); the gather does: no
        # timing table of a kernel that failed its check
        correctness=rules.gpu_correctness.output.summary,
        cpu_ceilings=rules.cpu_roofline.output.ceilings,
        code=code("scripts/gpu_timing.py"),
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
    conda:
        CONDA_ENV
    params:
        cfg=config["gpu"]["timing"],
        random_seed=config["random_seed"],
    script:
        "../../scripts/gpu_timing.py"


rule gpu_bytes_shard:
    """Stage 3: a shard of the GPU's DRAM bytes (Nsight Compute) of naive, the kernel and contenders beside the model; planned points without ncu."""
    input:
        code=code("scripts/gpu_bytes_shard.py"),
        contenders=contender_modules("bytes"),
    output:
        shard=out(C.GPU_BYTES_SHARD),
        manifest=manifest_of("gpu_bytes_shard"),
    log:
        logfile("gpu_bytes_shard/{shard}"),
    benchmark:
        benchfile("gpu_bytes_shard/{shard}")
    wildcard_constraints:
        shard=SHARD_NAME,
    conda:
        CONDA_ENV
    resources:
        gpu=1,
        gpu_measure=1,
    params:
        cfg=lambda w: shard_config("bytes", w.shard),
        l2_bytes=config["symbolic"]["l2_bytes"],
        require_cuda=config["gpu"]["require_cuda"],
        random_seed=config["random_seed"],
        contenders=contender_entries("bytes"),
        contender_packages=contender_packages("bytes"),
    script:
        "../../scripts/gpu_bytes_shard.py"


rule gpu_bytes:
    """Stage 3: the DRAM bytes' shards gathered into its tables; refused where they ran on different GPUs or versions."""
    input:
        shards=shard_outputs("bytes", C.GPU_BYTES_SHARD),
        manifests=shard_outputs("bytes", C.manifest("gpu_bytes_shard")),
        code=code("scripts/gpu_bytes.py"),
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
    conda:
        CONDA_ENV
    params:
        l2_bytes=config["symbolic"]["l2_bytes"],
    script:
        "../../scripts/gpu_bytes.py"
