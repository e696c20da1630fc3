"""PGD with EOT and exact gradients through the whole purification (Table 1, "Full gradient", plus EOT)."""

from __future__ import annotations

from .bpda_eot import BPDAEOT

__all__ = ["FullGradientPGDEOT"]


class FullGradientPGDEOT(BPDAEOT):
    """
    x_{i+1} = Π(x_i + α sign E_k[∇_x L(g_φ(f_θ^{(k)}(x)), y)|_{x = x_i}]): autograd through every purification
    step, the injected noise and the adaptive step sizes (the white-box attack of Croce et al. 2022), averaged over
    ``eot_samples`` purifications run as one stacked batch. The estimator's ADPPurifiers are switched to
    ``gradient="full"`` while attacking and restored afterwards; other PyTorch preprocessors are differentiated as
    they are (which is how a gradient-masking defence shows up: see :mod:`art_adp.evaluation.sanity`).

    | Paper link: https://arxiv.org/abs/2106.06041 (Table 1); Croce et al., "Evaluating the Adversarial
      Robustness of Adaptive Test-time Defenses", ICML 2022, https://arxiv.org/abs/2202.13711

    Parameters as in :class:`~art_adp.attacks.BPDAEOT`; memory grows with ``batch_size`` × purification steps.
    """

    mode = "full"
