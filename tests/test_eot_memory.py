"""EOT gradients in blocks of a memory budget: equal to the unblocked computation, memory flat in the draws (measured
at real size, marked ``e2e``: CI runs it after the suite, ``python -m pytest -m e2e``)."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from art.estimators.classification import PyTorchClassifier

from art_adp import ADPPurifier, DefendedModel, EOTClassifier, NCSNv2
from art_adp.attacks._core import cross_entropy
from art_adp.ensemble import logits as defended_logits
from art_adp.ensemble import GraphMemory, RowBlocks, eot_gradient, stack_draws

ROOT = Path(__file__).resolve().parents[1]


def build(gradient: str, seed: int = 0, **purifier_kwargs):
    torch.manual_seed(0)
    score = NCSNv2(1, 8, ngf=4)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10))
    purifier = ADPPurifier(
        score, steps=3, gradient=gradient, generator=torch.Generator().manual_seed(seed), **purifier_kwargs
    )
    est = PyTorchClassifier(
        clf,
        torch.nn.CrossEntropyLoss(),
        input_shape=(1, 8, 8),
        nb_classes=10,
        clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier],
    )
    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    return est, purifier, x, torch.tensor([0, 1, 2, 3, 4])


def unblocked(est, x, y, draws):
    """The reference: all draws stacked in one pass, one backward (the computation before blocks)."""
    rows = x.repeat(draws, 1, 1, 1).requires_grad_(True)
    loss = cross_entropy(defended_logits(est, rows), y.repeat(draws))
    (g,) = torch.autograd.grad(loss.sum(), rows)
    return g.view(draws, *x.shape).sum(0) / draws, loss.detach().view(draws, -1).mean(0)


@pytest.mark.filterwarnings("ignore:one EOT draw")
@pytest.mark.parametrize("gradient", ["full", "bpda"])
@pytest.mark.parametrize(
    "limits", [{"batch_size": 3}, {"memory_budget": 1e-6}, {"batch_size": 7, "memory_budget": 2**20}]
)
def test_blocked_eot_gradient_equals_the_unblocked_one_same_seed(gradient, limits):
    est, purifier, x, y = build(gradient)
    purifier.generator.manual_seed(5)
    ref, ref_loss = unblocked(est, x, y, draws=7)
    purifier.generator.manual_seed(5)
    g, loss = eot_gradient(lambda z: defended_logits(est, z), x, y, cross_entropy, 7, **limits)
    assert g.abs().sum() > 0
    torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    # the generator advanced exactly as far as one pass over the 35 rows: the next draw is the same
    after = torch.randn(3, generator=purifier.generator)
    purifier.generator.manual_seed(5)
    torch.randn(35 * 64, generator=purifier.generator)
    assert torch.equal(after, torch.randn(3, generator=purifier.generator))


def test_a_row_above_the_budget_warns_with_the_fix():
    est, _, x, y = build("full")
    with pytest.warns(UserWarning, match="more than memory_budget .*set gradient_checkpointing=True"):
        eot_gradient(lambda z: defended_logits(est, z), x, y, cross_entropy, 2, memory_budget=1e-6)


def test_eot_classifier_gradients_are_the_unblocked_ones():
    est, purifier, x, y = build("full")
    purifier.generator.manual_seed(2)
    ref, _ = unblocked(est, x, y, draws=6)
    eot = EOTClassifier(
        est, ensemble_size=6, batch_size=4, memory_budget=1000, loss=torch.nn.CrossEntropyLoss(reduction="none")
    )
    purifier.generator.manual_seed(2)
    torch.testing.assert_close(torch.from_numpy(eot.loss_gradient(x.numpy(), y.numpy())), ref, rtol=1e-5, atol=1e-7)
    # class gradients: the logit of each true class, the same draws
    purifier.generator.manual_seed(2)
    rows = x.repeat(6, 1, 1, 1).requires_grad_(True)
    picked = defended_logits(est, rows).gather(1, y.repeat(6)[:, None])
    (g,) = torch.autograd.grad(picked.sum(), rows)
    purifier.generator.manual_seed(2)
    got = eot.class_gradient(x.numpy(), label=y.numpy())
    torch.testing.assert_close(torch.from_numpy(got[:, 0]), g.view(6, *x.shape).mean(0), rtol=1e-5, atol=1e-7)


def test_defended_model_backward_recomputes_blocks_with_the_same_noise():
    est, purifier, x, _ = build("full")
    gen = purifier.generator

    def run(**kwargs):
        model = DefendedModel.from_estimator(est, ensemble_size=9, aggregate="logits", **kwargs)
        gen.manual_seed(3)
        xg = x.clone().requires_grad_(True)
        out = model(xg)
        (g,) = torch.autograd.grad(out[:, 0].sum() + out[:, 3].sum(), xg)
        return out.detach(), g, torch.randn(4, generator=gen)

    out, g, after = run()  # 45 rows: the 16-row probe, then one block of the rest
    budget = GraphMemory()
    with budget:  # one row's graph, measured the same way
        gen.manual_seed(3)
        defended_logits(est, x[:1].clone().requires_grad_(True))
    out_b, g_b, after_b = run(memory_budget=3 * budget.nbytes / 2**20)  # checkpointed blocks of about 3 rows
    torch.testing.assert_close(out_b, out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_b, g, rtol=1e-5, atol=1e-7)
    assert torch.equal(after_b, after)  # the replay put the generator back where the forward left it


def test_row_blocks_follow_the_budget_and_the_cap():
    plan = RowBlocks(100, batch_size=40, memory_budget=5 * 2**10 / 2**20, device="cpu")  # 5 KiB
    spans = []
    for a, b in plan:
        spans.append((a, b))
        plan.record(b - a, (b - a) * 2**10)  # 1 KiB per row: 5 rows per block
    assert spans[:3] == [(0, 16), (16, 21), (21, 26)] and spans[-1][1] == 100
    plan = RowBlocks(100, batch_size=8, memory_budget=1000, device="cpu")
    spans = [(a, b) for a, b in plan if plan.record(b - a, 10) is None]
    assert spans == [(a, min(a + 8, 100)) for a in range(0, 100, 8)]


def test_graph_memory_counts_the_saved_tensors():
    x = torch.rand(7, 11, requires_grad=True)
    with GraphMemory() as graph:
        y = x.exp()  # saves its result: 7 × 11 float32
        z = y.exp()  # saves its own result
    assert graph.nbytes == 2 * 7 * 11 * 4
    with GraphMemory() as graph:
        (z * 2).sum()
    assert graph.nbytes == 0  # multiplication by a constant saves nothing


def test_memory_budget_must_be_a_positive_number_of_mib():
    est, _, x, y = build("bpda")
    with pytest.raises(ValueError, match=re.escape("memory_budget must be a number of MiB > 0 or None, got 0.")):
        eot_gradient(lambda z: defended_logits(est, z), x, y, cross_entropy, 2, memory_budget=0)
    with pytest.raises(ValueError, match=re.escape("memory_budget must be a number of MiB > 0 or None, got -5.")):
        EOTClassifier(est, memory_budget=-5)


# Peak memory in a subprocess (VmHWM, reset between measurements through /proc/self/clear_refs): a score model whose
# activations dominate (256 channels at 8×8: about 1.3 MB of graph per image and draw over 10 steps), 8 images.
PEAKS = textwrap.dedent(
    """
    import json, re, sys
    import numpy as np, torch, torch.utils.checkpoint
    torch.set_num_threads(1)
    from art.estimators.classification import PyTorchClassifier
    from art_adp import ADPPurifier, DefendedModel
    from art_adp.attacks import PGDEOT

    paths, gradient, budget = sys.argv[1].split(","), sys.argv[2], json.loads(sys.argv[3])
    extra = {} if budget is None else {"memory_budget": budget}

    def hwm():
        return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

    def reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    torch.manual_seed(0)
    c = 256
    score = torch.nn.Sequential(
        torch.nn.Conv2d(1, c, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv2d(c, 1, 3, padding=1)
    )
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    purifier = ADPPurifier(score, steps=10, step_size=0.05, generator=torch.Generator().manual_seed(0))
    est = PyTorchClassifier(
        clf, torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10, clip_values=(0.0, 1.0),
        preprocessing_defences=[purifier],
    )
    x = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(1)).numpy()
    y = np.arange(8)
    # the first torch.utils.checkpoint call imports about 800 modules (75 MB, once per process): do it before measuring
    one = torch.ones(2, requires_grad=True)
    torch.utils.checkpoint.checkpoint(torch.exp, one, use_reentrant=False).sum().backward()
    peaks = {}
    for path in paths:
        for draws in (1, 4, 50):
            reset()
            if path == "pgd":
                attack = PGDEOT(est, gradient=gradient, eot_samples=draws, max_iter=1, eps=0.1, eps_step=0.1, **extra)
                attack.generate(x, y)
            else:  # torchattacks' view: the defended model differentiated
                purifier.set_params(gradient=gradient)
                model = DefendedModel.from_estimator(est, ensemble_size=draws, **extra)
                xt = torch.from_numpy(x).requires_grad_(True)
                model(xt).sum().backward()
            peaks[f"{path} {draws}"] = hwm()
    print(json.dumps(peaks))
    """
)


def peak_memory(paths: str, gradient: str, budget: float | None, root: Path = ROOT) -> dict[str, int]:
    """Peak resident memory (bytes) of one gradient at EOT 1, 4 and 50 on each path (``"pgd"``: PGDEOT;
    ``"defended"``: DefendedModel's backward), measured in a fresh interpreter: ``{"pgd 50": bytes, ...}``."""
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", PEAKS, paths, gradient, json.dumps(budget)],
        env=env,
        cwd=root,  # `python -c` imports from the current folder first
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.e2e  # real-size autograd graphs, ~300 MB at EOT 50 (CI: python -m pytest -m e2e)
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_peak_memory_at_eot_50_is_that_of_eot_4():
    # a 24 MiB budget: blocks of about 37 rows; EOT 4 of 8 images is 32 rows, EOT 50 is 400 (about 300 MB of graph
    # in one block, which the code before blocks held: 1.6× the peak of EOT 4)
    peaks = peak_memory("pgd,defended", "full", 24)
    mib = {k: round(v / 2**20) for k, v in peaks.items()}
    assert peaks["pgd 50"] <= 1.2 * peaks["pgd 4"], mib
    assert peaks["defended 50"] <= 1.2 * peaks["defended 4"], mib


def test_the_estimate_states_the_sanity_checks_cost():
    from art_adp.apps.evaluation.run import EvalConfig, _cells, _images_left, plan, sanity_memory
    from art_adp.runs import engine

    c = EvalConfig.preset("paper", attacks=("full-pgd-eot",))
    settings = plan(c)
    units = [(s, a, np.arange(64)) for s in settings for a in s.attacks]
    probe = {"forward": 1.0, "full": 3.0, "graph_row_bytes": 2**20}
    # EOT up to 50 on chunks of 64: 3,200 rows, 512 of them (the 512 MiB CPU budget at 1 MiB a row) per block
    assert sanity_memory(units, c, probe, "cpu") == {"rows": 512, "graph_bytes": 512 * 2**20, "budget": 512 * 2**20}

    def sanity_seconds(units) -> float:  # the sanity settings' share of the engine's one estimate, as evaluate logs it
        seconds = engine.estimate(_cells(settings, c, {}, np.empty(0), "shared"), _images_left(units), lambda t: probe)
        return sum(t for (setting, _), t in seconds.items() if setting.startswith("sanity"))

    # per example: the flags (2 forward + 1 full pass, not judged), ε = 1 and ε/2 (40 × EOT 15 full passes of 3 s),
    # iterations 10, 20, 100 at EOT 15, EOT 1, 5, 50 at 40 iterations, each of these 8 judged S × R = 100 times (the
    # paper preset's S = 10, R = 10)
    per_example = (
        (2 + 3) + 2 * 40 * 15 * 3 + sum(k * 15 * 3 for k in (10, 20, 100)) + sum(40 * k * 3 for k in (1, 5, 50))
    )
    # the best iterate (one run) judged on 10 fresh draws forward (1 s) each time, check_every "auto": every iterate
    # where 10 draws cost under a quarter of an iteration (EOT × 3 passes, so EOT 15 and 50: k + 1 judgements of a
    # k-iteration run), else at the start and every 5 iterations (EOT 1 and 5 at 40 iterations: 40 // 5 + 1 = 9)
    judged = 2 * 41 + (9 + 9 + 41) + sum(k + 1 for k in (10, 20, 100))
    assert judged == 274
    per_example += 10 * 1 * judged
    assert sanity_seconds(units) == pytest.approx(64 * (per_example + 8 * 100))
    assert sanity_seconds([u for u in units if not u[0].name.startswith("sanity")]) == 0


def test_estimate_only_logs_the_sanity_stage(tmp_path):
    import art_adp
    from art_adp.apps.evaluation.run import EvalConfig, evaluate

    from evalsuite_models import tiny_models

    mlp, score, x, y = tiny_models()
    logged = []
    out = evaluate(
        mlp,
        art_adp.ADPPurifier(score, steps=1),
        x[:16],
        y[:16],
        config=EvalConfig.preset("smoke", attacks=("full-pgd-eot",)),
        run_dir=tmp_path,
        progress=False,
        log=logged.append,
        estimate_only=True,
    )
    rows = out["sanity"]["rows"]
    assert out["sanity"]["seconds"] > 0 and out["sanity"]["graph_bytes"] > 0
    assert re.search(
        rf"Sanity checks: about \d+ s of it; .* MiB of autograd graph at a time \(blocks of {rows} ", logged[0]
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.trace.*` is deprecated:DeprecationWarning")
def test_checkpointed_blocks_of_a_torchscript_classifier_give_the_plain_gradient():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(64, 3))  # fmt: skip
    traced = torch.jit.trace(net, torch.rand(2, 1, 4, 4))  # its first runs save other tensors than later ones
    x = torch.rand(5, 1, 4, 4)

    def gradient(memory_budget):
        xg = x.clone().requires_grad_(True)
        return torch.autograd.grad(stack_draws(traced, xg, 6, memory_budget=memory_budget).square().sum(), xg)[0]

    plain = gradient(512.0)  # one recorded pass
    with pytest.warns(UserWarning, match="blocks of one row"):  # the probe's 16 rows, then checkpointed blocks
        torch.testing.assert_close(gradient(1e-5), plain)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace.*` is deprecated:DeprecationWarning")
def test_a_torchscript_classifier_keeps_its_draws_graphs_whole_and_gets_the_plain_gradient():
    from art_adp.attacks import _core
    from art_adp.ensemble import scripted

    est, purifier, x, y = build("full")
    assert not scripted(est)
    est._model._model = torch.jit.trace(est.model, torch.rand(2, 1, 8, 8))  # pylint: disable=protected-access
    assert scripted(est)

    def gradient(memory_budget):
        purifier.generator.manual_seed(5)
        return _core.eot_loss_gradient(est, x, y, cross_entropy, 6, target="ensemble", batch_size=None,
                                       memory_budget=memory_budget)[0]  # fmt: skip

    plain = gradient(512.0)
    with pytest.warns(UserWarning, match="a TorchScript module runs in these draws"):
        torch.testing.assert_close(gradient(1e-5), plain)  # over the budget: kept whole, not checkpointed


@pytest.mark.filterwarnings("ignore:one EOT draw")  # the one-byte budget: blocks of one row, as intended
def test_the_probe_times_the_full_gradient_at_the_rows_the_attacks_blocks_hold(monkeypatch):
    """The attacks stack draws into blocks as large as the memory budget allows (RowBlocks); a full-gradient pass
    timed at a quarter of the forward's rows cost the digits' purifier 3.5x more per row than such a block, and the
    strongest preset's estimate 5.3 days where 45 h was the same work."""
    from art_adp.ensemble import default_memory_budget
    from art_adp.runs import engine

    est, _, x, _ = build("full")
    x = x.numpy()
    assert engine.CPU_PROBE_ROWS == 128
    monkeypatch.setattr(engine, "CPU_PROBE_ROWS", 12)  # a small cap keeps the test short
    out = engine.probe(est, x, 4096)
    assert out["rows"] == 12 and out["full_rows"] == 12  # the budget's rows exceed the cap: a quarter timed before
    assert engine.probe(est, x, 6)["full_rows"] == 6  # and the batch size caps them
    monkeypatch.setattr("art_adp.ensemble.default_memory_budget", lambda dev: 2**-20)  # one byte
    assert engine.probe(est, x, 4096)["full_rows"] == 1  # a block of the budget: one row
    monkeypatch.undo()
    assert default_memory_budget("cpu") == 512 and engine.CPU_PROBE_ROWS == 128
