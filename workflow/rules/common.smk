import os
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import contains_wildcard

from minimodel.floor import contract as C
from minimodel.floor.provenance.code import code_closure
from minimodel.floor.provenance.project import (
    UnsafeResultsDir,
    check_results_dir,
    check_written_folders,
    inside,
)
from minimodel.gpu import device_slots, shards

SRC = Path("src/minimodel")


def _as_written(folder):
    """A resolved folder relative to the project when inside it (as rules and logs show paths)."""
    return Path(os.path.relpath(folder, PROJECT)) if inside(folder, PROJECT) else folder


def _results_dir():
    """config["results_dir"], refused where a run would overwrite the project or a reference."""
    try:
        results = check_results_dir(
            config["results_dir"], PROJECT, config["overwrite_reference"]
        )
    except UnsafeResultsDir as err:
        raise SystemExit(str(err))
    return _as_written(results)


RESULTS = _results_dir()


def _written_folders(rules):
    """The folder of every output, log and benchmark of `rules`, as the rules name them.

    A path with a wildcard (cpu/bytes/{dtype}/bytes.csv) is written in folders only the DAG
    knows: its constant folder (cpu/bytes) and what already lies in it, since a link there
    leads the write elsewhere; a folder made later is made inside a checked one.
    """
    folders = set()
    for each in rules:
        for product in each.products():
            if not contains_wildcard(product):
                folders.add(Path(product).parent)
                continue
            base = PROJECT / os.path.dirname(product.constant_prefix())
            folders.add(base)
            if base.is_dir():
                folders.update(
                    e for e in base.iterdir() if e.is_dir() or e.is_symlink()
                )
    return sorted(folders)


def check_rule_folders(rules):
    """Refuse the run when a folder a rule writes resolves (through `..` or a symlink) to a
    place results_dir may not be: checking results_dir alone misses a linked results/x/symbolic.
    """
    try:
        check_written_folders(
            _written_folders(rules),
            config["results_dir"],
            PROJECT,
            config["overwrite_reference"],
        )
    except UnsafeResultsDir as err:
        raise SystemExit(str(err))


def _compare_reference():
    """config["compare"]["reference"] as a folder, None when no comparison is asked for.

    A run written into the reference itself (overwrite_reference) is not compared with it.
    """
    reference = config["compare"]["reference"]
    if reference is None:
        return None
    folder = (PROJECT / reference).resolve()
    if folder == (PROJECT / RESULTS).resolve():
        return None  # the run refreshes it: empty or not, there is nothing to compare with yet
    if not (folder / "symbolic").is_dir():
        raise SystemExit(
            f"compare.reference: {reference} holds no run of this workflow; set it to a "
            "results folder (such as results/reference/nvidia-h200) or to null"
        )
    return _as_written(folder)


COMPARE_REFERENCE = _compare_reference()
COMPARED = list(C.COMPARED_TABLES + C.COMPARED_OPTIONAL_TABLES)
REFERENCE_MANIFESTS = list(C.COMPARED_MANIFESTS)


def code(script):
    """The script and every minimodel module it imports (code.code_closure): a rule's code.

    Listed as inputs so that editing a module re-runs exactly the rules that use it; the rule's
    manifest records the same list.
    """
    return code_closure(script, SRC)


def _one_line(call, *args):
    """`call(*args)`; a contender it cannot read stops the run with the project's line alone, as
    the Snakefile's check does, not inside "ContenderError in file .../common.smk" and a traceback.
    """
    try:
        return call(*args)
    except ContenderError as err:
        raise SystemExit(str(err))


def contender_modules(stage):
    """The files of the user's contenders `stage` runs, and every file they import that no
    installed distribution holds: inputs of its rule, hashed into its manifest, so that editing
    one re-runs exactly the rules that run it (docs/contenders-inputs.md)."""
    return [str(p) for p in _one_line(contender_registry.user_modules, config, stage)]


def contender_packages(stage):
    """The installed distributions those contenders import, name -> version: a parameter of its
    rule, so its manifest records them (their files are not hashed)."""
    return _one_line(contender_registry.user_packages, config, stage)


def contender_entries(stage):
    """The contenders `stage` runs, as the config gives them (built-ins by name alone)."""
    return _one_line(contender_registry.entries, config, stage)


def out(*parts):
    """A path under results_dir; the parts are the contract's (minimodel.floor.contract, imported as C)."""
    return str(RESULTS.joinpath(*parts))


def manifest_of(rule_name):
    return out(C.manifest(rule_name))


def logfile(rule_name):
    return out(C.LOGS, f"{rule_name}.log")


def benchfile(rule_name):
    return out(C.BENCHMARKS, f"{rule_name}.tsv")


# `snakemake --sdm conda` builds every rule's environment from this file.
CONDA_ENV = "../envs/minimodel.yaml"


def whole_machine():
    """Threads of a rule that must run alone (a ceiling or a timing beside other jobs is noise).

    A local run gives it every core of --cores, so nothing runs beside it. A cluster executor
    gives no core count: there it asks for one, unless the profile's set-threads says more.
    """
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def gpu_count():
    """K of a local run's `--resources gpu=K` (the default profile's 1); None elsewhere."""
    given = workflow.global_resources.get("gpu")
    return getattr(given, "value", given)


def per_gpu():
    """Threads of a job that measures on one GPU (gpu_timing_shard): the machine's cores shared
    among the K GPUs of a local run, so that K measure at once; elsewhere `whole_machine`.
    """
    return max(1, whole_machine() // (gpu_count() or 1))


# a shard's name (minimodel.gpu.shards.name): lower-case words joined by "_" and "-"
SHARD_NAME = "[a-z0-9_-]+"


def shard_plan(stage):
    """name -> selection of each shard of GPU stage `stage` (the config's gpu.shards)."""
    section = config["gpu"][stage]
    try:
        return shards.plan(stage, section, config["gpu"]["shards"][stage])
    except ValueError as err:
        raise SystemExit(str(err))


def shard_config(stage, name):
    """The config a shard of `stage` runs (its `cfg` parameter: what re-runs it when changed)."""
    return shards.shard_config(stage, config["gpu"][stage], SHARDS[stage][name])


def shard_outputs(stage, path):
    """`path` (a contract name with {shard}) of every shard of `stage`: what its gather reads."""
    return [out(path.format(shard=name)) for name in SHARDS[stage]]


class _RuleKind:
    """`{rule_kind[NAME]}` in a message: "localrule" where rule NAME runs on this host, else
    "rule", as Snakemake's own job lines say (a dry run does not decide: "rule"); asked as the
    job is shown, once the executor is known (a SLURM run submits the GPU rules, and runs the
    `localrules` here)."""

    def __getitem__(self, name):
        here = not workflow.dryrun and workflow.is_local(workflow.get_rule(name))
        return "localrule" if here else "rule"


rule_kind = _RuleKind()


def name_jobs(rules):
    """Give each of `rules` without one a `message` naming its job: its rule, wildcards and log.

    Snakemake prints a rule's message in place of its input, output and log lists, where every
    job listed the ~20 modules of its `code` inputs, most of the console. A failed job still
    gets Snakemake's whole error block, inputs included, and its log; a rule's inputs are in its
    manifest (docs/workflow.md).
    """
    for each in rules:
        if each.message is None:
            shown = ", ".join(
                f"{w}={{wildcards.{w}}}" for w in sorted(each.wildcard_names)
            )
            each.message = (
                f"{{rule_kind[{each.name}]}} {each.name}"
                + (f" ({shown})" if shown else "")
                + (": log {log}" if each.log else ":")
            )
