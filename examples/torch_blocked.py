"""A plain PyTorch contender: attention computed in blocks of keys with an online softmax.

The shape of a contender (see README, "Measure your own kernel"): `forward(q, k, v, causal)`
takes (B, H, N, d) tensors and returns O of q's shape and dtype. Runs on any device.
"""

import torch


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
            block: int = 128) -> torch.Tensor:
    n, d = q.shape[-2], q.shape[-1]
    scale = d**-0.5
    qf = q.float() * scale
    m = torch.full(q.shape[:-1], float("-inf"), device=q.device)
    l = torch.zeros(q.shape[:-1], device=q.device)
    acc = torch.zeros(q.shape, device=q.device)
    rows = torch.arange(n, device=q.device)[:, None]
    for start in range(0, n, block):
        kb, vb = k[..., start:start + block, :].float(), v[..., start:start + block, :].float()
        s = qf @ kb.transpose(-1, -2)
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        # rows with every key masked so far keep m = -inf: their weights stay 0, not NaN
        shift = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = torch.exp(s - shift[..., None])
        alpha = torch.exp(torch.where(torch.isinf(m), float("-inf"), m - shift))
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p @ vb
        m = m_new
    return (acc / l[..., None]).to(q.dtype)
