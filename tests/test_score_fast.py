"""The fast training path of train_score_model (bf16, channels_last, background checkpoints, compile, lr rule),
each against the plain fp32 path."""

import json
import os
import re
import runpy
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from tqdm.auto import tqdm

import art_adp.score.train as train_module
from art_adp import NCSNv2, dsm_loss, geometric_sigmas, load_score_model, save_score_model, train_score_model
from art_adp.score.train import large_batch_lr
from art_adp.serialization import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _tiny_conv() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ELU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ELU(),
        nn.Conv2d(16, 1, 3, padding=1),
    )


def test_bf16_training_tracks_fp32_and_the_tolerance_separates_other_training():
    # 120 steps of a small conv net on binary-ish 8×8 images. Measured on this setup: bf16 differs from fp32 by
    # < 1e-5 (relative) in the EMA's DSM loss on fixed draws and by 5e-4 in its outputs on fixed noisy inputs
    # (relative to how far training moved them); the fp32 run with another seed differs by 1.1e-3 and 4.6e-2,
    # with the learning rate 20 % higher by 3.8e-3 and 2.1e-2. The tolerances (3e-4 and 5e-3) sit between:
    # bf16 learning something else would fail them.
    g = torch.Generator().manual_seed(0)
    x = torch.rand(256, 1, 8, 8, generator=g)
    x = (x > 0.6).float() * 0.8 + 0.1 * x
    sigmas = geometric_sigmas(1.0, 0.05, 4)
    x_eval = x.repeat(8, 1, 1, 1)
    x_probe = x[:128] + 0.3 * torch.randn(x[:128].shape, generator=torch.Generator().manual_seed(5))

    def run(**kwargs):
        torch.manual_seed(0)
        model = _tiny_conv()
        with torch.no_grad():
            init = model(x_probe)
        args = {"seed": 0, "lr": 1e-3, "precision": "fp32", **kwargs}
        ema = train_score_model(model, x, sigmas, 120, batch_size=32, progress=False, **args)
        with torch.no_grad():
            loss = dsm_loss(ema, x_eval, sigmas, generator=torch.Generator().manual_seed(123)).item()
            return loss, ema(x_probe), init

    ref_loss, ref_out, init = run()
    moved = (ref_out - init).norm()

    def gaps(loss, out, _):
        return abs(loss - ref_loss) / ref_loss, ((out - ref_out).norm() / moved).item()

    bf16 = gaps(*run(precision="bf16"))
    assert bf16[0] < 3e-4 and bf16[1] < 5e-3, bf16
    other_seed, other_lr = gaps(*run(seed=1)), gaps(*run(lr=1.2e-3))
    assert other_seed[0] > 3e-4 and other_seed[1] > 5e-3, other_seed  # the tolerance would catch these
    assert other_lr[0] > 3e-4 and other_lr[1] > 5e-3, other_lr


def test_channels_last_gives_the_same_loss_and_training(tiny):
    x, sigmas = tiny
    torch.manual_seed(0)
    a = NCSNv2(1, 8, ngf=4)
    b = NCSNv2(1, 8, ngf=4)
    b.load_state_dict(a.state_dict())
    b.to(memory_format=torch.channels_last)
    xc = x.contiguous(memory_format=torch.channels_last)
    la = dsm_loss(a, x, sigmas, generator=torch.Generator().manual_seed(1))
    lb = dsm_loss(b, xc, sigmas, generator=torch.Generator().manual_seed(1))
    assert lb.item() == pytest.approx(la.item(), rel=1e-5)
    b.to(memory_format=torch.contiguous_format)
    ea = train_score_model(a, x, sigmas, 3, batch_size=8, seed=2, progress=False)
    eb = train_score_model(b, x, sigmas, 3, batch_size=8, seed=2, progress=False, channels_last=True)
    for k, v in ea.state_dict().items():
        assert torch.allclose(eb.state_dict()[k], v, rtol=1e-4, atol=1e-6), k
        assert eb.state_dict()[k].is_contiguous(), k  # handed back in the ordinary format
    assert b.begin_conv.weight.is_contiguous()


def _record_writes(monkeypatch, delay: float):
    """Wrap the checkpoint write: keep each file's bytes by step; optionally wait first, so that training runs
    on while a background write holds its snapshot (a snapshot sharing memory with training would then change)."""
    written: dict[int, bytes] = {}
    real = save_score_model  # the library's own, not an earlier wrapper

    def save(model, path, **kwargs):
        time.sleep(delay)
        real(model, path, **kwargs)
        written[kwargs["step"]] = Path(path).read_bytes()

    monkeypatch.setattr(train_module, "save_score_model", save)
    return written


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_background_checkpoints_equal_synchronous_ones_and_resume_exactly(tiny, tmp_path, monkeypatch, precision):
    x, sigmas = tiny
    torch.manual_seed(0)
    init = NCSNv2(1, 8, ngf=4).state_dict()
    files = {}
    for name, async_checkpoint in (("sync", False), ("async", True)):
        written = _record_writes(monkeypatch, delay=0.3 if async_checkpoint else 0.0)
        model = NCSNv2(1, 8, ngf=4)
        model.load_state_dict(init)
        path = tmp_path / f"{name}.safetensors"
        kwargs = {"precision": precision, "async_checkpoint": async_checkpoint, "checkpoint_every": 1}
        train_score_model(model, x, sigmas, 3, batch_size=8, seed=3, progress=False, checkpoint_path=path, **kwargs)
        files[name] = dict(written)
    assert sorted(files["async"]) == [1, 2, 3]
    assert files["async"] == files["sync"]  # bit for bit, the background writes included
    header = read_checkpoint(tmp_path / "async.safetensors")[1]["train"]
    assert (header["precision"], header["channels_last"], header["compile"]) == (precision, False, False)

    # Resume from the background write at step 2 and go on to 4: the same as 4 steps straight, bit for bit.
    monkeypatch.undo()
    resume_at = tmp_path / "at2.safetensors"
    resume_at.write_bytes(files["async"][2])
    fresh = NCSNv2(1, 8, ngf=4)
    resumed = train_score_model(
        fresh, x, sigmas, 4, batch_size=8, seed=99, progress=False, checkpoint_path=resume_at, precision=precision
    )
    straight_model = NCSNv2(1, 8, ngf=4)
    straight_model.load_state_dict(init)
    straight = train_score_model(
        straight_model, x, sigmas, 4, batch_size=8, seed=3, progress=False, precision=precision
    )
    for k, v in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
    for k, v in straight_model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_keyboard_interrupt_waits_for_the_pending_write_and_saves(tiny, tmp_path, monkeypatch):
    x, sigmas = tiny
    written = _record_writes(monkeypatch, delay=0.3)
    real_loss, calls = train_module.dsm_loss, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(train_module, "dsm_loss", interrupted)
    path = tmp_path / "s.safetensors"
    with pytest.raises(KeyboardInterrupt):
        train_score_model(
            NCSNv2(1, 8, ngf=4),
            x,
            sigmas,
            10,
            batch_size=8,
            seed=0,
            progress=False,
            checkpoint_path=path,
            checkpoint_every=2,
        )
    assert sorted(written) == [2, 3]  # the background write at 2 finished, then the interrupt's at 3
    assert load_score_model(path).training_info["step"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]  # no temporary file left behind


def test_resume_refuses_another_precision_and_allows_channels_last(tiny, tmp_path):
    x, sigmas = tiny
    path = tmp_path / "s.safetensors"
    train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 1, batch_size=4, seed=0, progress=False, checkpoint_path=path)
    message = (
        f"Cannot resume from {path}: it was trained with precision='fp32', not 'bf16'; switching changes the "
        "arithmetic of every later step. Resume with precision='fp32', or use another checkpoint_path or resume=False."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        train_score_model(
            NCSNv2(1, 8, ngf=4), x, sigmas, 2, batch_size=4, progress=False, checkpoint_path=path, precision="bf16"
        )
    # channels_last only changes the memory layout (the same arithmetic, to float rounding): allowed.
    ema = train_score_model(
        NCSNv2(1, 8, ngf=4), x, sigmas, 2, batch_size=4, progress=False, checkpoint_path=path, channels_last=True
    )
    assert ema.training_info["step"] == 2
    assert read_checkpoint(path)[1]["train"]["channels_last"] is True


def test_a_channels_last_resume_keeps_adams_moments_in_the_parameters_layout(tiny, tmp_path):
    """Fused Adam (CUDA) refuses moments whose strides differ from the parameters' (the checkpoint stores them
    contiguous); after a channels_last resume every moment has its parameter's strides, with the stored values."""
    x, sigmas = tiny
    path = tmp_path / "s.safetensors"
    train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 2, batch_size=4, seed=0, progress=False, checkpoint_path=path)
    model = NCSNv2(1, 8, ngf=4).to(memory_format=torch.channels_last)
    ema = NCSNv2(1, 8, ngf=4)
    opt = torch.optim.Adam(model.parameters())
    train_module._restore(path, model, ema, opt, torch.Generator(), sigmas)  # pylint: disable=protected-access
    tensors, _ = read_checkpoint(path)
    four_d = [p for p in model.parameters() if p.ndim == 4]
    assert any(not p.is_contiguous() for p in four_d)  # channels_last weights: most are not contiguous
    for i, param in enumerate(model.parameters()):
        moment = opt.state[param]["exp_avg"]
        assert moment.stride() == param.stride()
        torch.testing.assert_close(moment, tensors[f"train/optim/{i}/exp_avg"], rtol=0, atol=0)


def test_lr_warmup_scales_the_first_adam_step():
    # Adam's first step moves every weight with a non-zero gradient by lr·g/(|g| + eps) ≈ ±lr; with a warm-up
    # of 4 steps the first step's rate is lr/4.
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    sigmas = torch.tensor([0.5])
    for warmup, expected in ((0, 1e-2), (4, 2.5e-3)):
        torch.manual_seed(0)
        model = _tiny_conv()
        before = [p.detach().clone() for p in model.parameters()]
        train_score_model(model, x, sigmas, 1, batch_size=8, lr=1e-2, seed=0, progress=False, lr_warmup=warmup)
        moved = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(model.parameters(), before)])
        assert moved.max().item() == pytest.approx(expected, rel=1e-3)


def test_large_batch_lr_values_and_errors():
    assert large_batch_lr(128) == pytest.approx(1e-3)
    assert large_batch_lr(512) == pytest.approx(2e-3)
    assert large_batch_lr(2048) == pytest.approx(4e-3)
    assert large_batch_lr(512, rule="linear") == pytest.approx(4e-3)
    assert large_batch_lr(512, rule="none") == pytest.approx(1e-3)
    assert large_batch_lr(64, base_lr=2e-4, base_batch_size=16) == pytest.approx(4e-4)
    with pytest.raises(ValueError, match=re.escape("rule must be 'sqrt', 'linear' or 'none', got 'cube'.")):
        large_batch_lr(512, rule="cube")
    with pytest.raises(ValueError, match=re.escape("batch_size must be a positive integer, got 0.")):
        large_batch_lr(0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"precision": "fp16"},
            "precision='fp16' is not supported: fp16 needs loss scaling (a GradScaler, whose skipped steps the EMA "
            "and the exact resume would have to follow). Use precision='bf16' (the same tensor-core speed, fp32's "
            "exponent range, no scaling) or 'fp32'.",
        ),
        ({"precision": "bfloat16"}, "precision must be 'fp32' or 'bf16', got 'bfloat16'."),
        ({"channels_last": 1}, "channels_last must be True or False, got 1."),
        (
            {"compile": "yes"},
            "compile must be True, False or a torch.compile mode in ['default', 'reduce-overhead', 'max-autotune', "
            "'max-autotune-no-cudagraphs'], got 'yes'.",
        ),
        ({"lr_warmup": -1}, "lr_warmup must be a non-negative integer (steps), got -1."),
        ({"log_every": 0}, "log_every must be a positive integer (steps), got 0."),
        ({"lr": 0.0}, "lr must be a positive number, got 0.0."),
    ],
)
def test_speed_option_errors(tiny, kwargs, message):
    x, sigmas = tiny
    with pytest.raises(ValueError, match=re.escape(message)):
        train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 1, progress=False, **kwargs)


@pytest.mark.skipif(
    os.environ.get("ART_ADP_TEST_COMPILE") != "1",
    reason="torch.compile of NCSNv2 takes minutes on a CPU (this test: 408 s, passed, on the shared 2-core "
    "machine under load); set ART_ADP_TEST_COMPILE=1 to run it.",
)
def test_compile_keeps_the_checkpoint_keys_and_the_training(tiny, tmp_path):
    x, sigmas = tiny
    torch.manual_seed(0)
    a = NCSNv2(1, 8, ngf=4)
    b = NCSNv2(1, 8, ngf=4)
    b.load_state_dict(a.state_dict())
    path = tmp_path / "c.safetensors"
    ea = train_score_model(a, x, sigmas, 2, batch_size=8, seed=0, progress=False)
    eb = train_score_model(b, x, sigmas, 2, batch_size=8, seed=0, progress=False, compile=True, checkpoint_path=path)
    tensors, header = read_checkpoint(path)
    assert not any("_orig_mod" in k for k in tensors)
    assert {k for k in tensors if not k.startswith("train/")} == set(NCSNv2(1, 8, ngf=4).state_dict())
    assert header["train"]["compile"] is True
    for k, v in ea.state_dict().items():
        assert torch.allclose(eb.state_dict()[k], v, atol=1e-5), k
    assert load_score_model(path).training_info["step"] == 2


@pytest.mark.e2e  # the whole benchmark script (CI: python -m pytest -m e2e)
def test_train_speed_smoke(tmp_path, monkeypatch):
    out = tmp_path / "speed.json"
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["train_speed.py", "--smoke", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(ROOT / "benchmarks" / "train_speed.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    assert train_module.tqdm is tqdm  # the stopwatch is put back
    result = json.loads(out.read_text())
    rows = [r for r in result["results"] if r["status"] == "ok"]
    assert [r["mode"] for r in rows] == ["fp32", "bf16", "bf16+channels_last"]
    model = NCSNv2(1, 28, ngf=8)
    with FlopCounterMode(display=False) as counter:  # a batch of 2 here, of 16 there: the count is per sample
        model(torch.rand(2, 1, 28, 28)).sum().backward()
    for r in rows:
        assert r["samples_per_s"] > 0 and r["steps_timed"] == 2
        assert r["flops_per_sample"] == counter.get_total_flops() / 2 == 177_961_728  # fwd + bwd, ngf 8 at 28×28
    assert result["device"] == "cpu" and result["wall_s"] > 0


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_training_steps_do_not_synchronise(tiny, monkeypatch, precision):
    # torch's sync debug mode raises on any host-device synchronisation; it is on from the 2nd step's loss to the
    # 5th, so steps 2-4 run whole under it (draws, indexing, forward, backward, fused Adam, EMA, the bar update).
    x, sigmas = tiny
    real_loss, calls = train_module.dsm_loss, []

    def watched(*args, **kwargs):
        calls.append(1)
        torch.cuda.set_sync_debug_mode("error" if 2 <= len(calls) < 5 else "default")
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(train_module, "dsm_loss", watched)
    try:
        train_score_model(
            NCSNv2(1, 8, ngf=4),
            x,
            sigmas,
            5,
            batch_size=8,
            seed=0,
            progress=True,
            log_every=10,
            device="cuda",
            precision=precision,
            channels_last=True,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(calls) == 5


@cuda
def test_cuda_fused_adam_resumes_from_a_background_checkpoint(tiny, tmp_path):
    x, sigmas = tiny
    torch.manual_seed(0)
    init = NCSNv2(1, 8, ngf=4).state_dict()
    path = tmp_path / "s.safetensors"
    kwargs = {"batch_size": 8, "progress": False, "device": "cuda", "precision": "bf16", "channels_last": True}
    a, b = NCSNv2(1, 8, ngf=4), NCSNv2(1, 8, ngf=4)
    a.load_state_dict(init)
    b.load_state_dict(init)
    straight = train_score_model(a, x, sigmas, 6, seed=1, **kwargs)
    train_score_model(b, x, sigmas, 3, seed=1, checkpoint_path=path, **kwargs)
    resumed = train_score_model(NCSNv2(1, 8, ngf=4), x, sigmas, 6, seed=5, checkpoint_path=path, **kwargs)
    assert read_checkpoint(path)[1]["train"]["param_groups"][0]["fused"] is True
    for k, v in straight.state_dict().items():  # cuDNN may sum in another order: close, not necessarily equal
        assert torch.allclose(resumed.state_dict()[k], v, atol=1e-4), k
