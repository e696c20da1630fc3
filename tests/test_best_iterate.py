"""The best-iterate rule (art_adp.attacks.best_iterate): the three judgements' scores against hand-computed values, a
planted sequence of iterates where an earlier one is broken and the last is not, judgement on draws of its own that
leave the purifier's generator (the attack's gradient draws) untouched, common noise across offers, confirmations on
fresh draws at every use and on every one of several sets, messages."""

import pytest
import torch
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

from art_adp.attacks.best_iterate import (BestIterate, confirmed, derived_seed, judged_noise, judgement_scores,
                                          probability_margin)  # fmt: skip


def test_probability_margin_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]])
    assert torch.allclose(probability_margin(p, torch.tensor([0, 0])), torch.tensor([0.2, -0.5]))
    assert torch.allclose(probability_margin(p, torch.tensor([2, 1])), torch.tensor([-0.3, 0.3]))


def _logits(probs):
    return torch.tensor(probs).log()


def test_judgement_scores_by_hand():
    # 3 draws of 2 images, 2 classes, label 0. Image 0: draws 0.9, 0.8, 0.4 (one draw fails); image 1: all 0.6.
    z = _logits([[[0.9, 0.1], [0.6, 0.4]], [[0.8, 0.2], [0.6, 0.4]], [[0.4, 0.6], [0.6, 0.4]]])
    y = torch.tensor([0, 0])
    mean = judgement_scores(z, y, "mean")  # mean p0 = 0.7 and 0.6: margins 0.4, 0.2
    assert torch.allclose(mean, torch.tensor([0.4, 0.2]), atol=1e-6)
    worst = judgement_scores(z, y, "worst")  # image 0 broken by 1 of 3 draws; image 1 smallest margin 0.2
    assert torch.allclose(worst, torch.tensor([-1 / 3, 0.2]), atol=1e-6)
    majority = judgement_scores(z, y, "majority")  # leads 1/3 and 1, + 1/(4·3), plus mean margin / 24
    assert torch.allclose(majority, torch.tensor([1 / 3 + 1 / 12 + 0.4 / 24, 1 + 1 / 12 + 0.2 / 24]), atol=1e-6)
    # a tied vote is no win for the attack: unbroken (positive) whatever the mean margin, below a lead of one vote
    tie = _logits([[[0.9, 0.1]], [[0.4, 0.6]]])
    lost = judgement_scores(_logits([[[0.9, 0.1]], [[0.4, 0.6]], [[0.45, 0.55]]]), torch.tensor([0]), "majority")
    won = judgement_scores(_logits([[[0.9, 0.1]], [[0.6, 0.4]], [[0.45, 0.55]]]), torch.tensor([0]), "majority")
    assert 0 < judgement_scores(tie, torch.tensor([0]), "majority").item() < won.item() and lost.item() < 0
    assert judgement_scores(_logits([[[0.1, 0.9]], [[0.9, 0.1]]]), torch.tensor([0]), "majority").item() > 0
    with pytest.raises(ValueError, match="judgement must be one of"):
        judgement_scores(z, y, "median")


class Jitter(PreprocessorPyTorch):
    """A random defence: adds N(0, s²) from its own generator."""

    def __init__(self, s: float = 0.3) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.s, self.generator = s, torch.Generator().manual_seed(7)

    def forward(self, x, y=None):
        return x + self.s * torch.randn(x.shape, generator=self.generator), y


class Sign(torch.nn.Module):
    """Two classes: class 1 wins where the mean pixel exceeds 0.5."""

    def forward(self, x):
        t = x.flatten(1).mean(1) - 0.5
        return torch.stack([torch.zeros_like(t), 20 * t], 1)


def estimator(defences=None):
    return PyTorchClassifier(Sign(), torch.nn.CrossEntropyLoss(), input_shape=(1, 2, 2), nb_classes=2,
                             clip_values=(0, 1), preprocessing_defences=defences, device_type="cpu")  # fmt: skip


def test_an_earlier_broken_iterate_is_kept_over_a_robust_last_one():
    est = estimator()
    best = BestIterate(est, torch.tensor([0, 0]), draws=4)
    assert best.draws == 1  # nothing random: one draw
    start = torch.full((2, 1, 2, 2), 0.3)
    best.offer(start)
    broken = start.clone()
    broken[0] = 0.7  # image 0 broken at this checkpoint
    assert best.offer(broken).tolist() == [True, False]
    last = torch.full((2, 1, 2, 2), 0.45)  # the last iterate: both robust, image 1 nearer to broken than before
    assert best.offer(last).tolist() == [False, True]
    assert torch.equal(best.x[0], broken[0]) and torch.equal(best.x[1], last[1])
    assert best.broken.tolist() == [True, False]
    # offering only some rows compares those rows alone
    assert best.offer(torch.full((1, 1, 2, 2), 0.9), rows=torch.tensor([1])).tolist() == [True]
    assert best.broken.tolist() == [True, True]


def test_judgement_draws_are_its_own_and_common_across_offers():
    jitter = Jitter()
    est = estimator([jitter])
    before = jitter.generator.get_state()
    global_before = torch.random.get_rng_state()
    best = BestIterate(est, torch.tensor([0] * 6), draws=5, seed=3)
    x = torch.full((6, 1, 2, 2), 0.48)
    first, second = best.judge(x), best.judge(x)
    assert torch.equal(first, second)  # the same draws at every judgement
    assert torch.equal(jitter.generator.get_state(), before)  # the attack's draws untouched
    assert torch.equal(torch.random.get_rng_state(), global_before)
    assert jitter.generator is not best.generator
    other = BestIterate(est, torch.tensor([0] * 6), draws=5, seed=4).judge(x)
    assert not torch.equal(first, other)  # another seed: other draws
    with judged_noise(est, torch.Generator(), 0):
        assert jitter.generator is not None
    assert torch.equal(jitter.generator.get_state(), before)


class Keyed(PreprocessorPyTorch):
    """A defence whose draw is its generator's seed: every row is moved to 0.9 (a draw :class:`Sign` gets wrong) when
    the generator it draws from was seeded with none of ``robust`` (else passed on), and each seed it is run with
    (but its own generator's) is noted in ``seeds``."""

    def __init__(self, robust=()) -> None:
        super().__init__(device_type="cpu", is_fitted=True, apply_fit=False, apply_predict=True)
        self.robust, self.seeds = set(robust), []
        self.own = self.generator = torch.Generator().manual_seed(99)

    def forward(self, x, y=None):
        if self.generator is self.own:
            return x, y
        self.seeds.append(self.generator.initial_seed())
        return (x if self.generator.initial_seed() in self.robust else torch.full_like(x, 0.9)), y


def test_confirmations_draw_fresh_at_every_use_and_on_every_set():
    fresh_seeds = [derived_seed(5, "use", k) if k else 5 for k in range(6)]  # fresh's seed, then one per use
    assert len(set(fresh_seeds + [4])) == 7
    keyed = Keyed(robust=[fresh_seeds[2]])  # every draw broken but those of the third fresh use
    est = estimator([keyed])
    y, x = torch.tensor([0]), torch.full((1, 1, 2, 2), 0.3)
    best, fresh = BestIterate(est, y, draws=2, seed=4), BestIterate(est, y, draws=2, seed=5)
    best.offer(x)
    assert best.broken.tolist() == [True] and keyed.seeds == [4]
    one = torch.tensor([0])
    # two sets, both broken: confirmed, on the first two fresh uses' draws
    assert confirmed(best, fresh, one, sets=2).tolist() == [True] and keyed.seeds[1:] == fresh_seeds[:2]
    # three sets: the first (the third use) is robust, so the image is not confirmed and no further set is judged;
    # the kept score is the robust set's
    assert confirmed(best, fresh, one, sets=3).tolist() == [False] and keyed.seeds[3:] == [fresh_seeds[2]]
    assert fresh.uses == 3 and best.score[0] >= 0 and not best.broken[0]
    best.offer(torch.full((1, 1, 2, 2), 0.31))  # a later iterate broken on the own draws replaces it ...
    assert best.broken.tolist() == [True]
    # ... and is asked on new draws, never those of an earlier use (the third's would not confirm it)
    assert confirmed(best, fresh, one).tolist() == [True] and keyed.seeds[-1] == fresh_seeds[3]
    # deterministic given the seeds: another pair of judgements draws the same sequence
    again = BestIterate(est, y, draws=2, seed=5)
    assert [again.fresh_seed() for _ in range(6)] == fresh_seeds
    with pytest.raises(ValueError, match="sets"):
        confirmed(best, fresh, one, sets=0)


def test_messages():
    est = estimator()
    with pytest.raises(ValueError, match="judgement must be one of"):
        BestIterate(est, torch.tensor([0]), judgement="mode")
    with pytest.raises(ValueError, match="draws"):
        BestIterate(est, torch.tensor([0]), draws=0)
    best = BestIterate(est, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="call offer"):
        _ = best.broken
    with pytest.raises(ValueError, match="must hold every image"):
        best.offer(torch.zeros(1, 1, 2, 2), rows=torch.tensor([0]))
