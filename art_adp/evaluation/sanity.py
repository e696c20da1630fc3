"""Gradient-masking checks after Carlini et al., "On Evaluating Adversarial Robustness" (2019), §5
(https://arxiv.org/abs/1902.06705): each check returns a warning string or None.
"""

from __future__ import annotations

__all__ = ["check_black_box", "check_monotone", "check_unbounded", "sanity_warnings"]


def check_unbounded(accuracy: float, *, tolerance: float = 0.10) -> str | None:
    """An unbounded attack (ε = 1, the whole input range) must reach ≈ 0 % accuracy."""
    if accuracy > tolerance:
        return (f"GRADIENT MASKING? accuracy under an unbounded attack (eps = 1) is {100 * accuracy:.1f} %, expected "
                f"about 0 % (tolerance {100 * tolerance:.0f} %): the attack's gradients do not lead anywhere.")
    return None


def check_monotone(points: list[tuple[float, float]], what: str, *, tolerance: float = 0.05) -> str | None:
    """
    Accuracy must not rise as ``what`` (ε, iterations) grows.

    :param points: ``(value of what, accuracy)`` pairs.
    """
    points = sorted(points)
    for (a, acc_a), (b, acc_b) in zip(points, points[1:]):
        if acc_b > acc_a + tolerance:
            return (f"GRADIENT MASKING? accuracy rises with {what}: {100 * acc_a:.1f} % at {what} = {a:g} but "
                    f"{100 * acc_b:.1f} % at {what} = {b:g} (tolerance {100 * tolerance:.0f} points).")
    return None


def check_black_box(black_box: float, best_white_box: float, *, tolerance: float = 0.05) -> str | None:
    """A black-box attack (SPSA) must not beat the best white-box attack by more than ``tolerance``."""
    if black_box < best_white_box - tolerance:
        return (f"GRADIENT MASKING? the black-box SPSA ({100 * black_box:.1f} %) beats the best white-box attack "
                f"({100 * best_white_box:.1f} %) by more than {100 * tolerance:.0f} points: white-box gradients "
                "are uninformative.")
    return None


def sanity_warnings(*, unbounded: float | None, eps_points: list[tuple[float, float]],
                    iteration_points: list[tuple[float, float]], black_box: float | None,
                    best_white_box: float | None) -> list[str]:
    """Every check that has its inputs; the list of warnings (empty when all pass)."""
    found = []
    if unbounded is not None:
        found.append(check_unbounded(unbounded))
    if len(eps_points) > 1:
        found.append(check_monotone(eps_points, "eps"))
    if len(iteration_points) > 1:
        found.append(check_monotone(iteration_points, "iterations"))
    if black_box is not None and best_white_box is not None:
        found.append(check_black_box(black_box, best_white_box))
    return [w for w in found if w]
