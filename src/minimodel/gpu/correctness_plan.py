"""The correctness sweep's cases (`minimodel.gpu.correctness`), without torch: the workflow's own
process reads them to name the stage's shards (`minimodel.gpu.shards`).

`sweep_cases`: the lab's grid, awkward N, other head dims, each dtype, then the grouped-query
cases; `backward_cases`: those the backward runs. Under Triton's interpreter the grid shrinks.
"""

from __future__ import annotations

from minimodel.floor import contract


def sweep_cases(cfg: dict, backend: str) -> list[dict]:
    """The cases of the sweep: the lab's grid, awkward N, other head dims, each dtype, then the
    grouped-query cases (K and V with `gqa_kv_heads` heads).

    Under the interpreter the grid shrinks to cfg['interpreter'] (batch, heads, N <= max_n).
    """
    if backend == "interpreter":
        small = cfg["interpreter"]
        B, H, max_n, dtypes = small["batch"], small["heads"], small["max_n"], cfg["dtypes"]
        run_dtypes = set(small["dtypes"])
    else:
        B, H, max_n, dtypes = cfg["batch"], cfg["heads"], None, cfg["dtypes"]
        run_dtypes = set(dtypes)
    cases = []
    H_kv = cfg.get("gqa_kv_heads", 1)
    if H % H_kv:
        raise ValueError(f"gpu.correctness.gqa_kv_heads is {H_kv}, which does not divide the {H} query "
                         f"heads of the {backend} sweep; accepted: a divisor of {H}")
    shapes = [(n, cfg["head_dim"], H, contract.LAB_CASES) for n in cfg["n"]]
    shapes += [(n, cfg["head_dim"], H, contract.AWKWARD_CASES) for n in cfg["awkward_n"]]
    shapes += [(cfg["other_head_dims_n"], hd, H, contract.HEAD_DIM_CASES) for hd in cfg["other_head_dims"]]
    grouped = [(n, cfg["head_dim"], H_kv, contract.GQA_CASES) for n in cfg.get("gqa_n", ())]
    # the grouped cases come last, so every other case keeps the inputs it was drawn before them
    planned = [(t, s) for t in dtypes for s in shapes] + [(t, s) for t in dtypes for s in grouped]
    for dtype, (n, d, heads_kv, group) in planned:
        if max_n is not None and n > max_n:
            continue
        for causal in (False, True):
            case = {"B": B, "H": H, "H_kv": heads_kv, "N": n, "d": d, "causal": causal, "dtype": dtype,
                    "group": group}
            if dtype not in run_dtypes:
                case["skip"] = (contract.BF16_INTERPRETER_REASON if dtype == "bfloat16"
                                else "not in the interpreter's dtypes")
            cases.append(case)
    return cases


def backward_cases(cfg: dict, backend: str) -> list[dict]:
    """The sweep's cases the backward runs (`sweep_cases`, in its order, each with its index there,
    `index`): none with cfg['backward'] false; under the interpreter those with N <= backward_max_n."""
    if not cfg["backward"]:
        return []
    cases = [{**c, "index": i} for i, c in enumerate(sweep_cases(cfg, backend))]
    if backend == "interpreter":
        cases = [c for c in cases if c["N"] <= cfg["interpreter"]["backward_max_n"]]
    return cases
