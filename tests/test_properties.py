"""Property-based tests (hypothesis): 1,000 generated inputs across the public entry points per run.

Each input is valid or not by a rule written here, independently of the code: float dtype, the right shape,
finite, within 10 % of the range of ``clip_values``. Valid inputs must give outputs of the right shape inside
``clip_values`` (or finite scores); invalid ones must raise ``ValueError`` -- and nothing else ever may.
"""

import math

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2, ScoreNormDetector, purify

CLIP = (0.0, 1.0)
EXAMPLES = 200  # × 5 entry points = 1,000 inputs per run
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SHAPES = st.one_of(
    st.integers(0, 3).map(lambda n: (n, 1, 4, 4)),  # valid
    st.sampled_from([(4, 4), (2, 4, 4), (1, 1, 1, 4, 4), (2, 3, 4, 4), (2, 1, 6, 6), (2, 1, 4, 6)]),
)
VALUES = st.one_of(
    st.floats(0.0, 1.0),
    st.floats(-0.09, 1.09),  # SPSA-like probes: clipped
    st.floats(1.5, 300.0),  # 0-255 images and worse: refused
    st.floats(-300.0, -0.5),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
DTYPES = st.sampled_from([np.float32, np.float32, np.float64, np.float16, np.int64, np.uint8, np.bool_])


@st.composite
def images(draw):
    shape, dtype = draw(SHAPES), draw(DTYPES)
    values = draw(hnp.arrays(np.float64, shape, elements=VALUES))
    with np.errstate(invalid="ignore", over="ignore"):
        return values.astype(dtype)


def is_valid(x: np.ndarray) -> bool:
    return (x.ndim == 4 and x.shape[1:] == (1, 4, 4) and np.issubdtype(x.dtype, np.floating)
            and bool(np.isfinite(x).all()) and (x.size == 0 or (x.min() >= -0.1 and x.max() <= 1.1)))


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    score = NCSNv2(1, 4, ngf=2)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    purifier = ADPPurifier(score, steps=2, device_type="cpu", generator=torch.Generator().manual_seed(0))
    art = PyTorchClassifier(model=clf, loss=torch.nn.CrossEntropyLoss(), input_shape=(1, 4, 4), nb_classes=3,
                            clip_values=CLIP, preprocessing_defences=[purifier], device_type="cpu")
    detector = ScoreNormDetector(score, threshold=1.0, device_type="cpu")
    return score, clf, purifier, EOTClassifier(art, ensemble_size=2), detector


def check(call, x: np.ndarray, out_shape, bounded: bool) -> None:
    if not is_valid(x):
        with pytest.raises(ValueError):
            call()
        return
    out = call()
    out = out.detach().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
    assert out.shape == out_shape and np.isfinite(out).all()
    if bounded:
        assert out.size == 0 or (out.min() >= CLIP[0] and out.max() <= CLIP[1])


@SETTINGS
@given(x=images())
def test_purify(nets, x):
    score = nets[0]
    check(lambda: purify(score, torch.from_numpy(x), steps=2, generator=torch.Generator().manual_seed(0)),
          x, x.shape, bounded=True)


@SETTINGS
@given(x=images())
def test_adp_purifier_forward(nets, x):
    check(lambda: nets[2].forward(torch.from_numpy(x))[0], x, x.shape, bounded=True)


@SETTINGS
@given(x=images())
def test_defended_model(nets, x):
    _, clf, purifier, _, _ = nets
    model = DefendedModel(clf, purifier, ensemble_size=2)
    check(lambda: model(torch.from_numpy(x)), x, (len(x) if x.ndim else 0, 3), bounded=False)


@SETTINGS
@given(x=images(), gradient=st.booleans())
def test_eot_classifier(nets, x, gradient):
    eot = nets[3]
    if gradient:
        y = np.zeros(len(x), dtype=np.int64) if x.ndim else np.zeros(0, np.int64)
        check(lambda: eot.loss_gradient(x, y), x, x.shape, bounded=False)
    else:
        check(lambda: eot.predict(x), x, (len(x) if x.ndim else 0, 3), bounded=False)


@SETTINGS
@given(x=images())
def test_score_norm_detector(nets, x):
    detector = nets[4]

    def call():
        report, flags = detector.detect(x)
        assert flags.dtype == np.bool_ and np.array_equal(flags, report["score_norms"] > 1.0)
        return report["score_norms"]

    check(call, x, (len(x) if x.ndim else 0,), bounded=False)
