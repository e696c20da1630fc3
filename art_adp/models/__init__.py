"""
The classifiers of the ADP paper (plain ``nn.Module`` objects: images (N, C, H, W) in [0, 1] -> logits (N, K)) and
their training.
"""

from art_adp.models.adversarial import train_adversarial_classifier, train_purified_classifier
from art_adp.models.checkpoint import check_purifier, load_classifier, purifier_record, save_classifier
from art_adp.models.cnn import DigitsCNN, SmallCNN
from art_adp.models.mlp import MLP
from art_adp.models.resnet import CifarResNet
from art_adp.models.train import evaluate_accuracy, train_classifier
from art_adp.models.wrn import WideResNet

__all__ = [
    "MLP",
    "SmallCNN",
    "DigitsCNN",
    "WideResNet",
    "CifarResNet",
    "train_classifier",
    "evaluate_accuracy",
    "train_adversarial_classifier",
    "train_purified_classifier",
    "check_purifier",
    "purifier_record",
    "save_classifier",
    "load_classifier",
]
