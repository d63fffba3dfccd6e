"""inputs: per rule, which code, parameters and environment differ between the two manifests,
so that a reader sees why numbers moved. Informational, never a failure."""

from __future__ import annotations

import json
from pathlib import Path

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare.rows import DIFFERS, row

NAME = "inputs"
READS = contract.COMPARED_MANIFESTS
TOLERANCES: dict[str, float] = {}  # nothing is judged
CODE = "code"  # the metric of a row that names a module or script whose hash differs
ENVIRONMENT_KEYS = ("python", "torch", "triton", "numpy", "snakemake", "packages_sha256", "device", "cpu")
GPU_KEYS = ("name", "capability", "driver", "cuda_runtime", "cudnn")


def compare(run: Path, ref: Path) -> list[dict]:
    """Per rule: code, parameters and environment that differ between the two runs' manifests."""
    rows = []
    a, b = runs.manifests(run), runs.manifests(ref)
    for folder in sorted(set(a) & set(b)):
        ma, mb = a[folder], b[folder]
        rule = ma["rule"]
        code = [{e["path"]: e["sha256"] for e in m["inputs"] if e["kind"] in ("module", "script")}
                for m in (ma, mb)]
        for path in sorted(set(code[0]) | set(code[1])):
            if code[0].get(path) != code[1].get(path):
                state = ("changed" if path in code[0] and path in code[1]
                         else "only in the run" if path in code[0] else "only in the reference")
                rows.append(row(NAME, rule, CODE, path, state, verdict=DIFFERS))
        if ma.get("params") != mb.get("params"):
            rows.append(row(NAME, rule, "params", json.dumps(ma.get("params"))[:300],
                            json.dumps(mb.get("params"))[:300], verdict=DIFFERS))
        ea, eb = ma.get("environment", {}), mb.get("environment", {})
        pairs = [(k, ea.get(k), eb.get(k)) for k in ENVIRONMENT_KEYS]
        ga, gb = ea.get("gpu") or {}, eb.get("gpu") or {}
        pairs += [(f"gpu.{k}", ga.get(k), gb.get(k)) for k in GPU_KEYS]
        rows += [row(NAME, rule, f"environment: {k}", x, y, verdict=DIFFERS)
                 for k, x, y in pairs if x != y]
    return rows


def commits(folder: Path) -> list[str]:
    """The commits a run's manifests say made it (one, unless its rules ran at different commits)."""
    return sorted({m["git"]["commit"] for m in runs.manifests(folder).values()
                   if (m.get("git") or {}).get("commit")})


def line(r: dict) -> str:
    """One row of this part as verdict.json's inputs_that_differ says it."""
    if r["metric"] == CODE:
        return f"{r['item']}: {r['run']} ({r['reference']})"
    if r["metric"] == "params":
        return f"{r['item']}: parameters"
    return f"{r['item']}: {r['metric']}: {r['run']} (reference: {r['reference']})"
