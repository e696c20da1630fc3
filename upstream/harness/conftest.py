"""
Stand-in for ART's root ``conftest.py`` while checking the pull request (not part of the pull request).

ART's own root conftest imports TensorFlow as soon as pytest starts (to pick its default ``--framework``), and it is
not in the contribution kit. This file gives the tests the same interface: the ``--framework`` option, the
session-scoped ``framework`` fixture, ``art_warning`` (``ARTTestFixtureNotImplemented`` becomes a warning, any
other exception fails the test) and the ``only_with_platform`` / ``skip_framework`` / ``skip_module`` markers,
applied as ART applies them. ``upstream/check.sh`` copies it to the root of the assembled tree.
"""

import importlib
import warnings

import pytest

from tests.utils import ARTTestFixtureNotImplemented, master_seed

deep_learning_frameworks = ["keras", "tensorflow2", "tensorflow2v1", "pytorch", "kerastf", "jax", "huggingface"]
non_deep_learning_frameworks = ["scikitlearn"]
art_supported_frameworks = deep_learning_frameworks + non_deep_learning_frameworks

master_seed(1234)


def pytest_addoption(parser):
    parser.addoption(
        "--framework",
        action="store",
        default="pytorch",
        help=f"Framework the ART tests run for, one of {art_supported_frameworks}.",
    )


@pytest.fixture(scope="session")
def framework(request):
    ml_framework = request.config.getoption("--framework")
    if ml_framework == "tensorflow":
        ml_framework = "tensorflow2"
    if ml_framework not in art_supported_frameworks:
        raise ValueError(f"framework value {ml_framework} is unsupported; use one of {art_supported_frameworks}")
    return ml_framework


@pytest.fixture
def art_warning(request):
    def _art_warning(exception):
        if type(exception) is ARTTestFixtureNotImplemented:  # pylint: disable=unidiomatic-typecheck
            marker = request.node.get_closest_marker("only_with_platform")
            if marker is not None and len(marker.args) == 1:
                raise Exception("An only_with_platform test raised ARTTestFixtureNotImplemented: it never runs fully.")
            warnings.warn(UserWarning(exception))
        else:
            raise exception

    return _art_warning


@pytest.fixture(autouse=True)
def only_with_platform(request, framework):
    marker = request.node.get_closest_marker("only_with_platform")
    if marker is not None and framework not in marker.args:
        pytest.skip(f"skipped on this platform: {framework}")


@pytest.fixture(autouse=True)
def skip_by_framework(request, framework):
    marker = request.node.get_closest_marker("skip_framework")
    if marker is None:
        return
    to_skip = list(marker.args)
    if "dl_frameworks" in to_skip:
        to_skip.extend(deep_learning_frameworks)
    if "non_dl_frameworks" in to_skip:
        to_skip.extend(non_deep_learning_frameworks)
    if "tensorflow" in to_skip:
        to_skip.extend(["tensorflow2", "tensorflow2v1"])
    if framework in to_skip:
        pytest.skip(f"skipped on this platform: {framework}")


@pytest.fixture(autouse=True)
def skip_by_module(request):
    marker = request.node.get_closest_marker("skip_module")
    if marker is None:
        return
    for module in marker.args:
        try:
            importlib.import_module(module)
        except ImportError:
            pytest.skip(f"Test skipped because {module} not available.")
