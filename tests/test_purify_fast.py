"""The fast paths of purify: compaction, the JVP step rule, mixed precision, checkpointing, torch.compile.

Each is checked against the plain computation: bit for bit where the arithmetic is the same, to rounding
where it is not (a network evaluated on a smaller batch, bfloat16 forwards).
"""

import re

import pytest
import torch

from art_adp import ADPPurifier, NCSNv2, purify

MU = 0.5


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return NCSNv2(1, 8, ngf=4).eval().requires_grad_(False)


class Denoiser(torch.nn.Module):
    """A score with a well-defined curvature: a fixed blur-minus-identity convolution of tanh(x − μ) (negative
    semi-definite Jacobian, so the adaptive α lies inside its clamp) plus a small NCSNv2 term."""

    def __init__(self, net):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 1, 3, padding=1, bias=False)
        k = torch.full((3, 3), 1 / 9.0)
        k[1, 1] -= 1
        self.conv.weight.data = (k / 0.1).view(1, 1, 3, 3)
        self.net = net

    def forward(self, z):
        return self.conv(torch.tanh(z - MU)) + 0.2 * self.net(z)


@pytest.fixture(scope="module")
def denoiser(net):
    return Denoiser(net).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def x():
    return torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(1))


def reference_purify(score_model, x, *, sigma=0.25, steps=10, lam=0.05, delta=1e-3, step_clamp=(1e-5, 0.1),
                     tau=1e-3, generator=None):
    """The loop before this change (adaptive rule): every sample evaluated every step, stopped ones frozen."""
    if sigma > 0:
        x = x + sigma * torch.randn(x.shape, generator=generator).to(x)
    x = x.clamp(0, 1)
    active = torch.ones(x.shape[0], dtype=torch.bool)
    taken, used = torch.zeros_like(active, dtype=torch.long), []
    view = (-1,) + (1,) * (x.ndim - 1)
    for _ in range(steps):
        h = score_model(x)
        h_probe = score_model(x + delta * h)
        ratio = (h * h_probe).flatten(1).sum(1) / h.flatten(1).pow(2).sum(1).clamp_min(1e-30)
        alpha = (lam * delta / (1 - ratio)).clamp(*step_clamp)
        active = active & (alpha >= tau)
        alpha = torch.where(active, alpha, torch.zeros_like(alpha))
        x = torch.where(active.view(view), (x + alpha.view(view) * h).clamp(0, 1), x)
        taken, used = taken + active.long(), used + [alpha]
    return x, taken, torch.stack(used, 1)


class TwoChannelScore:
    """Channel 0 moves by h = −k·u/√(|u| + ε), u = x − μ; channel 1 holds k/100 per sample (h = 0 there, so it never
    changes). Elementwise, so a row's value never depends on the batch around it, bit for bit, and k travels with
    its row through compaction. The curvature grows as x nears μ, so α shrinks and samples stop mid-run."""

    def __init__(self):
        self.rows = 0

    def __call__(self, z):
        self.rows += z.shape[0]
        u, k = z[:, :1] - MU, 100 * z[:, 1:]
        return torch.cat([-k * u / (u.abs() + 1e-4).sqrt(), torch.zeros_like(k)], 1)


def stopping_mix():
    k = torch.logspace(0, 1.5, 10)
    x0 = torch.tensor([0.05, 0.9, 0.2, 0.7, 0.1, 0.95, 0.3, 0.6, 0.02, 0.8])
    x = torch.stack([x0.view(-1, 1, 1).expand(-1, 3, 3), (k / 100).view(-1, 1, 1).expand(-1, 3, 3)], 1)
    return x + 0.001 * torch.rand(x.shape, generator=torch.Generator().manual_seed(1))


def test_default_path_is_bit_identical_to_the_loop_it_replaced(net, x):
    xg = x.clone().requires_grad_()
    out, info = purify(net, xg, generator=torch.Generator().manual_seed(3), tau=0.0, return_info=True)
    ref, taken, used = reference_purify(net, xg, generator=torch.Generator().manual_seed(3), tau=0.0)
    assert torch.equal(out, ref) and torch.equal(info["steps"], taken) and torch.equal(info["step_sizes"], used)
    g_out, g_ref = (torch.autograd.grad(v.square().sum(), xg)[0] for v in (out, ref))
    assert torch.equal(g_out, g_ref)


@pytest.mark.parametrize("rule", ["adaptive", "adaptive-jvp"])
def test_compaction_is_bit_identical_to_freezing_with_a_mix_of_stops(rule):
    x = stopping_mix().requires_grad_()
    results = {}
    for compact in (False, True):
        score = TwoChannelScore()
        out, info = purify(score, x, sigma=0.0, steps=8, tau=0.01, step_size=rule, compact=compact, return_info=True)
        results[compact] = out, info, score.rows, torch.autograd.grad(out[:, 0].pow(3).sum(), x)[0]
    (out_f, info_f, rows_f, grad_f), (out_c, info_c, rows_c, grad_c) = results[False], results[True]
    steps = info_f["steps"].tolist()
    assert min(steps) == 0 and max(steps) == 8 and len(set(steps)) >= 4, steps  # stops at once, mid-run, never
    assert torch.equal(out_c, out_f)
    assert torch.equal(info_c["steps"], info_f["steps"]) and torch.equal(info_c["step_sizes"], info_f["step_sizes"])
    assert torch.allclose(grad_c, grad_f, rtol=1e-6, atol=1e-9)  # gathers reorder nothing; the sums may
    evals = 2  # h and h(x + δh), or h and the JVP
    assert rows_f == evals * 8 * len(x)
    assert rows_c == evals * sum(min(s + 1, 8) for s in steps)  # a sample stopping at step s is evaluated s + 1 times


def test_compaction_with_a_network_matches_to_rounding(net, x):
    # A real network's convolutions round differently for different batch sizes, so here: equal to 1e-6.
    a, ia = purify(net, x, sigma=0.0, steps=6, tau=0.003, return_info=True)
    b, ib = purify(net, x, sigma=0.0, steps=6, tau=0.003, compact=True, return_info=True)
    assert len(set(ia["steps"].tolist())) >= 3
    assert torch.equal(ia["steps"], ib["steps"])
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(ia["step_sizes"], ib["step_sizes"], rtol=1e-5)


def test_jvp_rule_is_lambda_s_for_a_linear_score():
    x = torch.full((2, 1, 3, 3), 0.9)
    out, info = purify(lambda z: -(z - MU) / 0.2, x, sigma=0, steps=4, step_size="adaptive-jvp", return_info=True)
    assert torch.allclose(info["step_sizes"], torch.full((2, 4), 0.05 * 0.2), rtol=1e-6)
    assert torch.allclose(out, MU + (x - MU) * 0.95**4, atol=1e-6)


def test_jvp_rule_agrees_with_the_delta_rule_where_the_difference_is_accurate(denoiser, x):
    # In float64 with δ = 1e-7 the finite difference is accurate to ~1e-7 relative: both rules give the same α.
    net64 = Denoiser(NCSNv2(1, 8, ngf=4)).double().eval().requires_grad_(False)
    net64.load_state_dict(denoiser.state_dict())
    kwargs = dict(sigma=0.0, steps=3, tau=0.0, delta=1e-7, return_info=True)
    a, ia = purify(net64, x.double(), **kwargs)
    b, ib = purify(net64, x.double(), step_size="adaptive-jvp", **kwargs)
    assert torch.allclose(ia["step_sizes"], ib["step_sizes"], rtol=1e-5)
    assert torch.allclose(a, b, atol=1e-7)
    assert ((ia["step_sizes"] > 1e-3) & (ia["step_sizes"] < 0.1)).all()  # inside the clamp: the rule decides


def test_jvp_rule_full_gradient_matches_finite_differences():
    h = lambda z: -torch.tanh(3 * (z - MU)) * 0.4  # noqa: E731
    x = torch.tensor([0.1, 0.7, 0.95, 0.3], dtype=torch.float64).view(1, 1, 2, 2).requires_grad_()
    f = lambda z: purify(h, z, sigma=0, steps=3, tau=0, step_size="adaptive-jvp").pow(2).sum()  # noqa: E731
    (grad,) = torch.autograd.grad(f(x), x)
    e = 1e-6
    fd = torch.stack([(f(x + e * d) - f(x - e * d)) / (2 * e) for d in torch.eye(4, dtype=x.dtype).view(4, 1, 1, 2, 2)])
    assert torch.allclose(grad.flatten(), fd.detach(), rtol=1e-5)


@pytest.mark.parametrize("step_size", ["adaptive-jvp", 0.01])
def test_bfloat16_forward_agrees_with_float32(denoiser, x, step_size):
    net = denoiser
    a, ia = purify(net, x, sigma=0.0, steps=5, tau=0.0, step_size=step_size, return_info=True)
    b, ib = purify(net, x, sigma=0.0, steps=5, tau=0.0, step_size=step_size, amp="bfloat16", return_info=True)
    assert b.dtype == torch.float32
    assert (a - b).abs().max() < 1e-3  # bfloat16 keeps 8 bits; measured 3e-4
    assert torch.allclose(ia["step_sizes"], ib["step_sizes"], rtol=0.01)  # measured 0.3 %
    assert not torch.equal(a, b)  # autocast did take effect


def test_checkpointed_full_gradient_equals_the_plain_one(net, x):
    grads = []
    for checkpoint in (False, True):
        xg = x.clone().requires_grad_()
        out = purify(net, xg, generator=torch.Generator().manual_seed(5), tau=0.0, steps=4,
                     gradient_checkpointing=checkpoint)
        grads.append(torch.autograd.grad(out.square().sum(), xg)[0])
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"compact": 1}, "compact must be True or False, got 1."),
        ({"gradient_checkpointing": "yes"}, "gradient_checkpointing must be True or False, got 'yes'."),
        ({"amp": "fp8"}, "amp must be None, 'bfloat16' or 'float16', got 'fp8'."),
        ({"amp": "bfloat16"}, "amp needs step_size='adaptive-jvp' or a manual schedule: the finite difference of "
                              "step_size='adaptive' (h(x + δh) − h(x) with δ = 1e-3) drowns in half-precision rounding."),
    ],
)
def test_bad_fast_path_options_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        purify(lambda z: -z, torch.rand(1, 1, 2, 2), **kwargs)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        ADPPurifier(torch.nn.Identity(), device_type="cpu", **kwargs)


def test_purifier_passes_the_options(net, x):
    kwargs = dict(sigma=0.1, tau=0.003, steps=3, step_size="adaptive-jvp", device_type="cpu")
    plain = ADPPurifier(net, generator=torch.Generator().manual_seed(2), **kwargs)
    fast = ADPPurifier(net, generator=torch.Generator().manual_seed(2), compact=True, gradient_checkpointing=True,
                       **kwargs)
    assert {"compact", "amp", "gradient_checkpointing", "compile"} <= set(fast.params)
    assert torch.allclose(plain.forward(x)[0], fast.forward(x)[0], atol=1e-6)
    grads = []
    for p in (plain, fast):
        p.set_params(gradient="full", generator=torch.Generator().manual_seed(2))
        xg = x.clone().requires_grad_()
        p.forward(xg)[0].square().sum().backward()
        grads.append(xg.grad)
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_compile_option_agrees_with_the_plain_network():
    torch.manual_seed(0)
    score = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv2d(4, 1, 3, padding=1))
    x = torch.rand(4, 1, 6, 6, generator=torch.Generator().manual_seed(0))
    kwargs = dict(sigma=0.0, steps=2, tau=0.0, device_type="cpu")
    plain = ADPPurifier(score, **kwargs)
    fast = ADPPurifier(score, compile="eager", **kwargs)  # dynamo's capture without minutes of CPU codegen
    assert torch.allclose(plain.forward(x)[0], fast.forward(x)[0], atol=1e-6)
    assert fast._network() is not score
    with pytest.raises(ValueError, match=r"^compile must be True, False or a torch.compile backend name, got 0.5.$"):
        fast.set_params(compile=0.5)
    assert fast.compile == "eager"


def test_without_compaction_a_cpu_loop_ends_once_every_sample_has_stopped():
    x = stopping_mix()
    x[:, 1] = 0.5  # k = 50 everywhere: every sample's first α is below τ = 0.01
    score = TwoChannelScore()
    out, info = purify(score, x, sigma=0.0, steps=8, tau=0.01, return_info=True)
    assert info["steps"].tolist() == [0] * len(x) and info["step_sizes"].shape == (len(x), 8)
    assert torch.equal(out, x.clamp(0, 1)) and info["step_sizes"].abs().sum() == 0
    assert score.rows == 2 * len(x)  # one step evaluated, not eight


def _half_linear_score(s: float, dtype: torch.dtype) -> torch.nn.Module:
    """h(x) = −(x − μ)/s as a 1×1 convolution whose parameters are in ``dtype`` (a half-precision network)."""
    conv = torch.nn.Conv2d(1, 1, 1)
    conv.weight.data.fill_(-1 / s)
    conv.bias.data.fill_(MU / s)
    return conv.to(dtype).eval().requires_grad_(False)


@pytest.mark.parametrize("dtype, s, side", [(torch.bfloat16, 0.2, 8), (torch.float16, 0.01, 16)])
def test_the_adaptive_step_of_a_half_precision_network_is_computed_in_float32(dtype, s, side):
    # bfloat16: 1 − ⟨h, h'⟩/‖h‖² = δ/s = 5e-3 sits at the format's resolution near 1 (2^-8);
    # float16: ‖h‖² = 256 · (0.3/0.01)² ≈ 2e5 overflows (max 65504) and clamp_min(1e-30) rounds to 0.
    net = _half_linear_score(s, dtype)
    x = (MU + 0.3 * torch.sign(torch.randn(2, 1, side, side, generator=torch.Generator().manual_seed(0)))).to(dtype)
    out, info = purify(net, x, sigma=0.0, steps=1, tau=0.0, return_info=True)
    h = net(x)
    h_probe = net(x + 1e-3 * h)  # the network's own outputs, in its dtype, as purify sees them
    hf, pf = h.float().flatten(1), h_probe.float().flatten(1)
    alpha = (0.05 * 1e-3 / (1 - (hf * pf).sum(1) / hf.pow(2).sum(1))).clamp(1e-5, 0.1)  # eq. 11 in float32
    assert info["step_sizes"].dtype == torch.float32 and out.dtype == dtype
    torch.testing.assert_close(info["step_sizes"][:, 0], alpha, rtol=1e-6, atol=0)
    if dtype == torch.float16:  # λs, as for a float32 network (in bfloat16 the probe x + δh itself rounds)
        assert torch.allclose(alpha, torch.full_like(alpha, 0.05 * s), rtol=0.02)
    assert torch.equal(out, (x.float() + alpha.view(-1, 1, 1, 1) * h.float()).clamp(0, 1).to(dtype))
    h_sq = (h * h).flatten(1).sum(1).clamp_min(1e-30)  # the same rule in the network's dtype loses the step
    naive = (0.05 * 1e-3 / (1 - (h * h_probe).flatten(1).sum(1) / h_sq)).float().clamp(1e-5, 0.1)
    assert not torch.allclose(naive, alpha, rtol=0.05)
