"""The released code's loop structure (jmyoon1/adp, as the issue describes it), written here to be timed.

S runs in a Python loop; in each run all samples are evaluated at every step until *every* sample has stopped
(a batch-level stop: stopped samples are still evaluated, their values frozen), and the stop test reads a
value back to the host each step. Per sample it computes what ``art_adp.purify`` computes (same α rule,
same freezing), so both give the same purified images for the same noise; only the schedule of work differs.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def baseline_purify(score_model, x, *, runs, sigma=0.25, steps=10, lam=0.05, delta=1e-3, step_clamp=(1e-5, 0.1),
                    tau=1e-3, generator=None, clip_values=(0.0, 1.0)):
    """:return: ``runs × N × …`` purified copies and the number of score evaluations (rows) spent."""
    outs, rows = [], 0
    view = (-1,) + (1,) * (x.ndim - 1)
    for _ in range(runs):  # S runs, one after another
        xt = (x + sigma * torch.randn(x.shape, generator=generator, device=x.device)).clamp(*clip_values)
        active = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        for _ in range(steps):
            h = score_model(xt)
            h_probe = score_model(xt + delta * h)
            rows += 2 * x.shape[0]
            ratio = (h * h_probe).flatten(1).sum(1) / h.flatten(1).pow(2).sum(1).clamp_min(1e-30)
            alpha = (lam * delta / (1 - ratio)).clamp(*step_clamp)
            active = active & (alpha >= tau)
            alpha = torch.where(active, alpha, torch.zeros_like(alpha))
            xt = torch.where(active.view(view), (xt + alpha.view(view) * h).clamp(*clip_values), xt)
            if not active.any().item():  # host sync every step; the batch stops only when all samples have
                break
        outs.append(xt)
    return torch.stack(outs), rows
