"""Published CIFAR-10 classifiers brought into a levers run folder (examples/cifar10_classifiers.py): the reference
ResNet-20 checkpoint layout (``module.`` prefixes, a ``state_dict`` entry) and a factory's code and state dict, made
here with random weights in the same formats, come back from the run folder computing what the originals compute."""

import importlib.util
import textwrap
from pathlib import Path

import pytest
import torch

from art_adp.apps import levers, levers_classifiers
from art_adp.models import CifarResNet

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "cifar10_classifiers.py"
TINY = textwrap.dedent('''
    import torch

    class Tiniest(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))
''')


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("cifar10_classifiers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_come_back_from_the_run_folder_computing_what_the_originals_compute(script, tmp_path, one_thread):
    torch.manual_seed(0)
    reference = CifarResNet(depth=20)  # the reference's names, random weights, saved as its checkpoints are
    torch.save({"best_prec1": 91.7, "state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}},
               tmp_path / "resnet20.th")  # fmt: skip
    folder = tmp_path / "scio"
    folder.mkdir()
    (folder / "tiniest.py").write_text(TINY)
    spec = importlib.util.spec_from_file_location("tiny_ref", folder / "tiniest.py")
    ref_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref_module)
    tiny = ref_module.Tiniest().eval()
    torch.save(tiny.state_dict(), folder / "tiniest.pt")
    run = tmp_path / "run"
    assert script.main(["--resnet20", str(tmp_path / "resnet20.th"), "--tiniest", str(folder), "--out", str(run)]) == 0
    x = torch.rand(5, 3, 32, 32)
    mean = torch.tensor(script.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(script.IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(levers_classifiers.brought("resnet20", run)(x), reference.eval()((x - mean) / std))
        torch.testing.assert_close(levers_classifiers.brought("tiniest", run)(x), tiny(x - 0.5))
    with pytest.raises(FileNotFoundError, match="put it in .* as adv.safetensors .* or adv.pt"):
        levers_classifiers.brought("adv", run)
    assert script.main(["--out", str(run)]) == 2  # nothing to bring
