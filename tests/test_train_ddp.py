"""Score-model training under torch.distributed: 2 CPU processes (gloo) against 1 process on the joint batch."""

import os
import socket

import pytest
import torch
import torch._dynamo  # noqa: F401  (Adam imports it on first use: once here, not 10 s in each forked child)
import torch.multiprocessing as mp

from art_adp import NCSNv2, geometric_sigmas, load_score_model, train_score_model
from art_adp.serialization import TRAIN_PREFIX, read_checkpoint
from art_adp.apps.cli import main
from art_adp.data import load_digits


def data():
    return torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(0)), geometric_sigmas(1.0, 0.05, 4)


CLI = ["train-score", "--batch-size", "4", "--ngf", "4", "--sigma-begin", "1", "--sigma-end", "0.05", "--num-sigmas",
       "4", "--seed", "1", "--checkpoint-every", "2", "--quiet", "--device", "cpu", "--precision", "fp32"]
# fp32 named: "auto" is bf16 on a CPU with native bf16, and the reference below trains in fp32


def cli_worker(rank, world, port, run_dir):
    """What torchrun does for each process: set the rendezvous variables, then run ``art-adp train-score``."""
    torch.set_num_threads(1)
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.manual_seed(rank)  # the CLI reseeds from --seed, so every rank starts from the same weights
    assert main([*CLI, "--iterations", "3", "--run-dir", str(run_dir)]) == 0  # interrupted at step 3 ...
    torch.manual_seed(100 + rank)
    assert main([*CLI, "--iterations", "5", "--run-dir", str(run_dir)]) == 0  # ... resumed by both ranks up to 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_take_the_steps_of_one_process_on_the_joint_batch_and_resume(tmp_path, capfd):
    # Two CPU processes (gloo), each with batch 4, through the CLI path torchrun takes, interrupted and resumed.
    mp.start_processes(cli_worker, args=(2, free_port(), tmp_path), nprocs=2, start_method="fork")
    assert capfd.readouterr().out.count("score model:") == 2  # rank 0 only, once per run
    # The reference: one process, the same initial weights (the CLI seeds them from --seed), seed and sigmas, on
    # the joint batch of 8.
    torch.manual_seed(1)
    model = NCSNv2(1, 8, ngf=4)
    ema = train_score_model(model, load_digits().x_train, geometric_sigmas(1.0, 0.05, 4), 5, batch_size=8, seed=1,
                            progress=False)
    tensors, header = read_checkpoint(tmp_path / "score.safetensors")
    assert header["step"] == 5
    raw = {k[len(f"{TRAIN_PREFIX}model/"):]: v for k, v in tensors.items() if k.startswith(f"{TRAIN_PREFIX}model/")}
    for k, v in model.state_dict().items():
        assert torch.allclose(raw[k], v, atol=2e-6), (k, (raw[k] - v).abs().max())
    loaded = load_score_model(tmp_path / "score.safetensors")
    for k, v in ema.state_dict().items():
        assert torch.allclose(loaded.state_dict()[k], v, atol=2e-6), k
    # The comparison can fail: half the batch (what one rank alone would have seen) gives other weights.
    torch.manual_seed(1)
    other = NCSNv2(1, 8, ngf=4)
    train_score_model(other, load_digits().x_train, geometric_sigmas(1.0, 0.05, 4), 5, batch_size=4, seed=1,
                      progress=False)
    assert not all(torch.allclose(raw[k], v, atol=2e-6) for k, v in other.state_dict().items())


def test_shard_losses_average_to_the_joint_loss():
    from art_adp import dsm_loss

    x, sigmas = data()
    torch.manual_seed(0)
    net = NCSNv2(1, 8, ngf=4)
    joint = dsm_loss(net, x[:8], sigmas, generator=torch.Generator().manual_seed(3))
    parts = [dsm_loss(net, x[:8], sigmas, generator=torch.Generator().manual_seed(3), shard=(r, 2)) for r in (0, 1)]
    assert torch.allclose((parts[0] + parts[1]) / 2, joint, rtol=1e-6)
    with pytest.raises(ValueError, match=r"^A batch of 8 cannot be split evenly over 3 ranks.$"):
        dsm_loss(net, x[:8], sigmas, shard=(0, 3))
