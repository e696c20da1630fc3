"""A loss on the purified state (DiffAttack's deviated reconstruction), for PGD+EOT and APGD-EOT: their
``dev_weight`` adds it; :class:`~art_adp.attacks.PGDEOTDev` and :class:`~art_adp.attacks.APGDEOTDev` are the two with
it on, under their registry names."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["DEV_WEIGHT", "PurifiedStateLoss", "deviation"]

#: The weight of the deviation term in the ``-dev`` attacks (λ of L = L_cls + λ L_dev; our default, not the paper's).
DEV_WEIGHT = 1.0


def deviation(purified: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """
    DiffAttack's deviated reconstruction, per example: ``‖purified − reference‖₂`` over all values, the distance of
    the purified image from the clean input it should reconstruct.

    :param purified: ``N×C×H×W`` purified images (with autograd).
    :param reference: ``N×C×H×W`` clean inputs.
    :return: ``N`` distances.
    """
    return (purified - reference).flatten(1).norm(dim=1)


class PurifiedStateLoss:
    """
    ``L = L_cls(logits, y) + dev_weight · ‖P(x') − x‖₂`` per example: the classifier's loss plus the deviation of the
    purified state P(x') of the attacked input from its clean input x (Kang et al. 2023's deviated-reconstruction
    loss, there summed over intermediate states of the reverse diffusion; here on the state the purifier returns, the
    last of them, which every purifier family gives). Maximising it pushes purification away from reconstructing x,
    even where the classifier's loss is flat.

    It takes one draw's ``(logits, purified images, inputs)`` (:meth:`~art_adp.DefendedModel.draw_states`, or
    :class:`~art_adp.EOTClassifier` with ``states=True``) and the labels, so it composes with
    :func:`~art_adp.ensemble.eot_gradient`'s blocks of draws and the memory budget. The clean input of each row is the
    row of ``reference`` nearest to it (ℓ2): an attacked row lies within ε of its clean input, so this finds it for
    distinct inputs further than 2ε apart, whichever subset and order of the batch the caller passes (ART's APGD passes
    the examples still unbroken).

    | Paper link: Kang, Song & Li, "DiffAttack: Evasion Attacks Against Diffusion-Based Adversarial Purification",
      NeurIPS 2023, https://arxiv.org/abs/2311.16124

    :param loss: The classifier's per-example loss ``(logits N×K, labels N) → N`` (cross-entropy, DLR).
    :param reference: The clean inputs ``N×C×H×W`` of the attacked batch.
    :param dev_weight: λ ≥ 0, the weight of the deviation (0: ``loss`` alone).
    """

    def __init__(
        self,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        *,
        reference: torch.Tensor,
        dev_weight: float = DEV_WEIGHT,
    ) -> None:
        self.loss = loss
        self.reference = reference.detach()
        self.dev_weight = dev_weight

    def reference_of(self, inputs: torch.Tensor) -> torch.Tensor:
        """The clean input of every row of ``inputs``: the nearest row of ``reference`` (ℓ2)."""
        ref = self.reference.to(inputs.device, inputs.dtype)
        nearest = torch.cdist(inputs.detach().flatten(1), ref.flatten(1)).argmin(1)
        return ref[nearest]

    def __call__(self, states: tuple[torch.Tensor, torch.Tensor, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        """
        :param states: One draw's ``(logits N×K, purified images N×C×H×W, inputs N×C×H×W)``.
        :param y: Labels ``N``.
        :return: ``N`` losses.
        """
        logits, purified, inputs = states
        out = self.loss(logits, y)
        if self.dev_weight == 0:
            return out
        return out + self.dev_weight * deviation(purified, self.reference_of(inputs)).to(out.dtype)
