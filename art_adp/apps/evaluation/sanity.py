"""Gradient-masking checks that can fail: each returns a warning string or None.

After Carlini et al., "On Evaluating Adversarial Robustness" (2019), §5 (https://arxiv.org/abs/1902.06705): an
unbounded attack reaches ≈ 0 %, accuracy does not rise with ε or iterations, a black-box attack does not beat the
white-box ones; convergence in EOT draws and iterations (Croce et al. 2022, https://arxiv.org/abs/2202.13711); and
AutoAttack's flags (Croce & Hein 2020, ``autoattack/checks.py``): a randomized defence (the same input judged twice
gives different outputs) needs EOT and repeated judging, and zero input gradients mean the attack is blind.
"""

from __future__ import annotations

__all__ = [
    "check_black_box",
    "check_converged",
    "check_monotone",
    "check_randomness",
    "check_unbounded",
    "check_zero_gradients",
]


def check_unbounded(accuracy: float, *, tolerance: float = 0.10) -> str | None:
    """An unbounded attack (ε = 1, the whole input range) must reach ≈ 0 % accuracy."""
    if accuracy > tolerance:
        return (
            f"GRADIENT MASKING? accuracy under an unbounded attack (eps = 1) is {100 * accuracy:.1f} %, expected "
            f"about 0 % (tolerance {100 * tolerance:.0f} %): the attack's gradients do not lead anywhere."
        )
    return None


def check_monotone(points: list[tuple[float, float]], what: str, *, tolerance: float = 0.05) -> str | None:
    """
    Accuracy must not rise as ``what`` (ε, iterations) grows.

    :param points: ``(value of what, accuracy)`` pairs.
    """
    points = sorted(points)
    for (a, acc_a), (b, acc_b) in zip(points, points[1:]):
        if acc_b > acc_a + tolerance:
            return (
                f"GRADIENT MASKING? accuracy rises with {what}: {100 * acc_a:.1f} % at {what} = {a:g} but "
                f"{100 * acc_b:.1f} % at {what} = {b:g} (tolerance {100 * tolerance:.0f} points)."
            )
    return None


def check_converged(points: list[tuple[float, float]], what: str, *, tolerance: float = 0.02) -> str | None:
    """
    The attack has converged in ``what`` (EOT draws, iterations): between the two largest values, accuracy falls by
    at most ``tolerance``.

    :param points: ``(value of what, accuracy)`` pairs, at least two.
    """
    points = sorted(points)
    (a, acc_a), (b, acc_b) = points[-2], points[-1]
    if acc_a - acc_b > tolerance:
        return (
            f"NOT CONVERGED: accuracy still falls with {what}: {100 * acc_a:.1f} % at {what} = {a:g}, "
            f"{100 * acc_b:.1f} % at {what} = {b:g} (more than {100 * tolerance:.0f} points); raise {what} "
            "until it stops falling."
        )
    return None


def check_black_box(black_box: float, best_white_box: float, *, tolerance: float = 0.05) -> str | None:
    """A black-box attack (SPSA) must not beat the best white-box attack by more than ``tolerance``."""
    if black_box < best_white_box - tolerance:
        return (
            f"GRADIENT MASKING? the black-box SPSA ({100 * black_box:.1f} %) beats the best white-box attack "
            f"({100 * best_white_box:.1f} %) by more than {100 * tolerance:.0f} points: white-box gradients "
            "are uninformative."
        )
    return None


def check_only_broken(indices: list[int], n: int, attack: str = "SPSA") -> str | None:
    """A gradient-free attack must break no image that every gradient attack left (``indices``: those it broke, worst
    of R, among the ``n`` it ran on)."""
    if indices:
        return (
            f"GRADIENT MASKING? the gradient-free {attack} breaks {len(indices)} of {n} images no gradient attack "
            "broke "
            f"(images {', '.join(map(str, indices))}): the gradients miss what a gradient-free search finds there; "
            "attack them with BPDA through the step that blocks the gradient (e.g. the clamp of the noisy input), "
            "more EOT draws, or a larger gradient-free budget."
        )
    return None


def check_randomness(random_fraction: float, *, eot_samples: int, repeats: int) -> str | None:
    """
    AutoAttack's randomness flag: if the same input judged twice gives different outputs, the defence is random,
    and an evaluation needs EOT (> 1 draw per gradient) and more than one judgement per example.

    :param random_fraction: Fraction of inputs whose two defended outputs differed.
    :param eot_samples: The smallest EOT draw count the gradient attacks used.
    :param repeats: R, judgements per example.
    """
    if random_fraction > 0 and (eot_samples <= 1 or repeats <= 1):
        return (
            f"RANDOMIZED DEFENCE: the same input judged twice gives different outputs ({100 * random_fraction:.0f} "
            f"% of inputs), but the attacks use EOT {eot_samples} and each example is judged R = {repeats} time(s): "
            "use EOT (AutoAttack's version='rand': 20 draws) and R > 1."
        )
    return None


def check_zero_gradients(zero_fraction: float) -> str | None:
    """AutoAttack's zero-gradient flag: inputs whose loss gradient through the defence is exactly zero."""
    if zero_fraction > 0:
        return (
            f"GRADIENT MASKING? the loss gradient through the defence is exactly zero for "
            f"{100 * zero_fraction:.0f} % of inputs: gradient-based attacks are blind there (use BPDA, "
            "a black-box attack, or a smooth surrogate)."
        )
    return None
