"""EOTClassifier's majority vote over S purifications in one batched pass is the vote of the same S draws taken one
at a time: with the purifier's generator re-seeded, the batched pass replays the single draws (once notebook 02's
hand-computed check)."""

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, EOTClassifier, NCSNv2
from art_adp.data import load_digits
from art_adp.models import DigitsCNN

S = 5


@pytest.fixture(scope="module")
def judged():
    """An ADP-defended digits classifier (untrained score model and CNN: the rule, not the accuracy, is tested),
    its purifier, and 16 test digits."""
    torch.manual_seed(0)
    score, classifier = NCSNv2(1, 8, ngf=8).eval(), DigitsCNN(nb_classes=10).eval()
    purifier = ADPPurifier(score, sigma=0.25, steps=3, gradient="bpda", generator=torch.Generator().manual_seed(0))
    defended = PyTorchClassifier(
        model=classifier,
        loss=torch.nn.CrossEntropyLoss(),
        input_shape=(1, 8, 8),
        nb_classes=10,
        clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier],
    )
    return defended, purifier, load_digits().x_test[:16]


def by_hand(defended, purifier, x, seed):
    """S single-draw log-probabilities (S × N × K), the generator re-seeded first."""
    purifier.generator.manual_seed(seed)
    single = EOTClassifier(defended, ensemble_size=1)
    return np.stack([single.predict(x) for _ in range(S)])


def test_batched_vote_replays_the_single_draws(judged):
    defended, purifier, x = judged
    logp = by_hand(defended, purifier, x, seed=1)
    purifier.generator.manual_seed(1)
    voted = EOTClassifier(defended, ensemble_size=S, aggregate="vote").predict(x)
    votes = np.stack([np.bincount(row, minlength=10) for row in logp.argmax(-1).T])  # N × K label counts
    probs = np.exp(logp).mean(0)  # N × K averaged probabilities
    # the vote as a distribution: (votes + averaged probabilities) / (S + 1), so ties go to the higher probability
    assert np.allclose(np.exp(voted), (votes + probs) / (S + 1), atol=1e-5)
    assert np.array_equal(voted.argmax(1), (votes + probs).argmax(1))
    # the draws differ (else the replay would be trivially equal): at S = 5 some digit gets two labels
    assert (votes.max(1) < S).any()


def test_other_noise_gives_other_draws(judged):
    """The replay depends on the seed: a different seed gives different single draws."""
    defended, purifier, x = judged
    assert not np.allclose(by_hand(defended, purifier, x, seed=1), by_hand(defended, purifier, x, seed=2))
