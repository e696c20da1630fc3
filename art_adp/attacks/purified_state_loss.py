"""DiffAttack's deviated-reconstruction loss on the purification's intermediate states, for PGD+EOT and APGD-EOT: their
``dev_weight`` adds it; :class:`~art_adp.attacks.PGDEOTDev` and :class:`~art_adp.attacks.APGDEOTDev` are the two with
it on, under their registry names."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..preprocessor import PurifierState

__all__ = ["DEV_WEIGHT", "PurifiedStateLoss", "deviation", "distance"]

#: λ of L = L_cls + λ L_dev, the paper's (Kang et al. 2023, Appendix D.2 and Table 8: λ = 1.0 for every experiment).
DEV_WEIGHT = 1.0


def distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``‖a − b‖₂`` per example, over all values: ``N×…`` → ``N``."""
    return (a - b).flatten(1).norm(dim=1)


def deviation(states: Sequence[PurifierState], clean: torch.Tensor) -> torch.Tensor:
    """
    DiffAttack's deviated-reconstruction loss, per example (Kang et al. 2023, eq. 8):
    L_dev = Σ_t α(t) d(x'_t, x_t) with α(t) = 1/|states|, the mean over the states of the distance of each state x'_t
    from its reference x_t (:meth:`~art_adp.preprocessor.PurifierState.reference`: the clean image diffused with the
    same noise to the state's level, or the clean image itself).

    :param states: The states of one draw, e.g. from :meth:`~art_adp.DefendedModel.draw_states`.
    :param clean: ``N×C×H×W`` clean images, row for row.
    :return: ``N`` deviations.
    """
    if not states:
        raise ValueError("deviation needs at least one state (the purified images).")
    return torch.stack([distance(s.state, s.reference(clean)) for s in states]).mean(0)


class PurifiedStateLoss:
    """
    DiffAttack's loss (Kang, Song & Li 2023, eq. 11): ``L = L_cls(logits, y) + λ L_dev`` per example, with
    L_dev (:func:`deviation`, eq. 8) the deviation of the purification's states of the attacked input from their
    references: every intermediate state and the purified output, each at weight α(t) = 1/|states|. Maximising it
    pushes purification off the path that reconstructs the clean input at every step, where the classifier's loss is
    flat or its gradient vanishes through the long purification graph.

    What the paper fixes, and what differs here:

    - λ = 1.0 (:data:`DEV_WEIGHT`; the paper's Appendix D.2 and its Table 8 ablation) against the classifier's CE or
      DLR, as the paper scales them.
    - α(t) = the reciprocal of the number of time steps the loss is taken at (Appendix D.2), the paper sampling those
      steps uniformly over [0, T]. Here it is taken at every state of the purification, α = 1/(the number of
      states): the purifiers here run tens of steps, not DiffPure's hundreds, so every step is affordable. α is
      uniform, not tied to the diffusion schedule, so it carries over to ADP unchanged.
    - d, which the paper leaves open, is the ℓ2 distance.
    - The reference of a reverse-diffusion state at level σ is the clean image x + σε with the *same* noise ε as the
      attacked trajectory (DiffAttack's x_t of the diffusion process; for the deterministic DDIM step it is exactly
      the trajectory a perfect denoiser takes from the clean image). ADP (Algorithm 1) has no schedule of falling
      noise levels: each of its steps moves the noisy start towards the clean image, so each state's reference is the
      clean image. Denoised smoothing has one state, its output.
    - Memory: :meth:`~art_adp.DefendedModel.draw_states` runs the purifiers with gradient checkpointing on, the
      segment-wise forwarding-backwarding of §3.3; the memory held is one step's graph plus one image per state.
      Measured (``benchmarks/state_loss_memory.py``, ``benchmarks/results/state_loss_memory.json``; AMD EPYC, one
      thread, one gradient of 16 rows of 28×28): the growth of peak RSS for ADP (NCSNv2, ngf 16) at T = 2 / 8 / 32
      steps is 189 / 207 / 246 MiB checkpointed against 205 / 827 / 3312 MiB with every step stored; for reverse
      diffusion (DenoiserUNet) at K = 2 / 8 / 32, 100 / 106 / 127 MiB against 50 / 194 / 789 MiB. The residual
      growth is the states themselves and the allocator; the gradients are equal.

    Rows are matched to their clean images by index: the labels carry each row's index in the attacked batch
    (``N×2`` (class, row); :func:`~art_adp.eot.tag_rows` makes labels that survive ART's subsets of the batch), so
    the match does not depend on where the attacked row has moved to.

    | Paper link: Kang, Song & Li, "DiffAttack: Evasion Attacks Against Diffusion-Based Adversarial Purification",
      NeurIPS 2023, https://arxiv.org/abs/2311.16124

    :param loss: The classifier's per-example loss ``(logits N×K, labels N) → N`` (cross-entropy, DLR).
    :param reference: The clean inputs ``N×C×H×W`` of the attacked batch, row i the clean image of row index i.
    :param dev_weight: λ ≥ 0, the weight of the deviation (0: ``loss`` alone).
    :param intermediate: Take the deviation at every state (DiffAttack); False: at the purified output alone, the
        loss this package had before (an ablation).
    """

    def __init__(
        self,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        *,
        reference: torch.Tensor,
        dev_weight: float = DEV_WEIGHT,
        intermediate: bool = True,
    ) -> None:
        self.loss = loss
        self.reference = reference.detach()
        self.dev_weight = dev_weight
        self.intermediate = intermediate

    def clean_of(self, rows: torch.Tensor) -> torch.Tensor:
        """
        The clean images of the row indices ``rows``.

        :raises ValueError: For an index outside the reference batch, naming the fix.
        """
        n = len(self.reference)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= n):
            raise ValueError(
                f"row indices must lie in [0, {n}), the rows of the reference batch, got {rows.min()}..{rows.max()}; "
                "label each row with its index in the batch given as reference (art_adp.eot.tag_rows)."
            )
        return self.reference[rows.to(self.reference.device)]

    def __call__(self, draw: tuple[torch.Tensor, Sequence[PurifierState]], y: torch.Tensor) -> torch.Tensor:
        """
        :param draw: One draw's ``(logits N×K, states)`` (:meth:`~art_adp.DefendedModel.draw_states`).
        :param y: ``N×2`` (class, row index in ``reference``).
        :return: ``N`` losses.
        """
        logits, states = draw
        out = self.loss(logits, y[:, 0])
        if self.dev_weight == 0:
            return out
        used = states if self.intermediate else states[-1:]
        return out + self.dev_weight * deviation(used, self.clean_of(y[:, 1])).to(out.dtype)
