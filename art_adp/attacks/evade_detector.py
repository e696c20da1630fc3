"""The detector-aware attack loss (ADP appendix, "Detecting adversarial examples"): fool the classifier while keeping
the score norm under the detector's threshold, for any ART attack that takes a custom loss, on a model wrapped in
:class:`~art_adp.detect.ScoreNormHead`."""

from __future__ import annotations

import torch

__all__ = ["EvadeDetectorLoss"]


class EvadeDetectorLoss(torch.nn.Module):
    """Cross-entropy on columns ``:K`` minus ``kappa · relu(column K)``: maximised, it fools the classifier while
    pushing the score norm under the detector's threshold. Accepts index or one-hot labels (ART passes one-hot
    ``N×(K+1)`` for a custom loss)."""

    def __init__(self, kappa: float) -> None:
        super().__init__()
        self.kappa = kappa

    def forward(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        labels = y.argmax(1) if y.ndim == 2 else y.long()
        ce = torch.nn.functional.cross_entropy(output[:, :-1], labels)
        return ce - self.kappa * torch.relu(output[:, -1]).mean()
