"""The command line is parsing only: each subcommand is one call of a function next to its application, with the
settings object (the library's or the application's own dataclass) built straight from the flags; a flag's default
is read from that dataclass alone, and ``--eot-samples`` / ``--memory-budget`` reach the attack under one name."""

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from art_adp.apps import cli, commands
from art_adp.apps.evaluation import PRESETS, EvalConfig
from art_adp.attacks import APGDEOT, PGDEOT
from art_adp.apps.evaluation.config import ATTACKS
from art_adp.attacks.registry import REGISTRY
from art_adp.purification import DEFAULTS

from test_registry import _estimator  # pylint: disable=wrong-import-order

SOURCE = Path(cli.__file__).read_text()
COMMANDS = ["demo", "train-score", "train-denoiser", "train-classifier", "detect", "certify", "corruptions", "evaluate",
            "import-ncsnv2", "prepare-cifar10", "reproduce", "rejudge"]
PATHS_ONLY = ("import-ncsnv2", "prepare-cifar10")  # they write a file, not a run folder


def _subparsers():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")  # pylint: disable=protected-access
    return action.choices


def test_cli_is_short_and_has_no_handler_over_15_lines():
    assert len(SOURCE.splitlines()) < 60 + 30 * len(cli.COMMANDS)  # parsing only: about 30 lines a command
    assert len(SOURCE.splitlines()) <= 370  # 17 subcommands; the flag machinery lives in apps/flags.py, model loading in
    # apps/loading.py
    builders = {f.__name__ for f in cli.COMMANDS}
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.parse(SOURCE).body
        if isinstance(node, ast.FunctionDef) and node.name not in builders and node.end_lineno - node.lineno >= 15
    ]
    assert long == []
    # the parser builders only add arguments: no call into the library, no file or model touched
    for node in ast.parse(SOURCE).body:
        if isinstance(node, ast.FunctionDef) and node.name in builders:
            called = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "?")
                      for c in ast.walk(node) if isinstance(c, ast.Call)}
            assert called <= {"add_parser", "add", "add_argument", "set_defaults", "_common", "_dataset", "_trained",
                              "_threads", "_fields", "_split", "list", "sorted", "join", "names", "presets_text",
                              "levers_datasets", "signature", "type", "items", "fields", "replace", "startswith",
                              "plan", "plan_names"}, (
                                  node.name, called)  # fmt: skip


def test_no_copied_field_lists_and_no_name_matching_fill():
    assert not hasattr(commands, "settings") and not hasattr(commands, "EVAL_FIELDS")
    assert len(Path(commands.__file__).read_text().splitlines()) < 100


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_is_one_call_with_its_settings(name, capsys):
    sub = _subparsers()[name]
    run, make = sub.get_default("run"), sub.get_default("settings")
    assert run.__module__.startswith("art_adp.apps.")
    if make is not None:  # the settings class is the command's first parameter
        first = next(iter(inspect.signature(run).parameters.values()))
        cls = make if isinstance(make, type) else EvalConfig
        assert dataclasses.is_dataclass(cls) and first.annotation in (cls.__name__, cls)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--run-dir" in out or name in PATHS_ONLY or (name == "rejudge" and "RUN_DIR" in out)  # a run folder's


def test_defaults_come_from_the_library_and_the_settings():
    evaluate = _subparsers()["evaluate"]
    assert (evaluate.get_default("sigma"), evaluate.get_default("steps")) == (DEFAULTS.sigma, DEFAULTS.steps)
    help_text = evaluate.format_help().replace("\n", " ")
    assert all(name in help_text.replace(" ", "") for name in ATTACKS)  # the attacks on the purification
    assert "--max-iter" in help_text and "(default: 40)" in help_text  # the paper preset's, read from EvalConfig
    _, config, keywords = cli.parse(["certify"])
    assert config.steps == DEFAULTS.steps and keywords["run_dir"] == "runs/certify"


def test_only_the_flags_given_set_the_settings():
    _, demo, _ = cli.parse(["demo", "--eps", "0.1", "--seed", "3"])
    assert (demo.eps, demo.seed, demo.sigma) == (0.1, 3, DEFAULTS.sigma)
    _, detect, _ = cli.parse(["detect", "--attacks", "blind", "--auc-eps"])
    assert (detect.attacks, detect.auc_eps) == (("blind",), ())
    _, recipe, keywords = cli.parse(["reproduce", "mnist", "--data-root", "d", "--n-bpda", "all", "--budgets", "2,4"])
    assert (recipe.n_bpda, recipe.budgets, keywords["data_root"]) == (None, (2, 4), "d")  # all: every test image
    _, score, _ = cli.parse(["train-score", "--seed", "5"])
    assert score.seed == 5 and "seed" not in cli.parse(["train-score"])[2]


def test_eot_samples_reaches_the_attack_under_one_name():
    """--eot-samples -> EvalConfig.eot_samples -> Budget.eot_samples -> the attack's eot_samples."""
    command, config, _ = cli.parse(["evaluate", "--preset", "smoke", "--eot-samples", "3", "--batch-size", "64"])
    assert command.__name__ == "evaluate_command" and isinstance(config, EvalConfig)
    assert (config.eot_samples, config.overridden, config.preset_name) == (3, ("batch_size", "eot_samples"), "smoke")
    budget = config.budget("bpda-eot")
    assert (budget.eot_samples, budget.batch_size, budget.max_iter) == (3, 64, PRESETS["smoke"].max_iter)
    assert config.budget("apgd-eot").eot_samples == PRESETS["smoke"].apgd_eot_samples  # APGD keeps its own count
    attack = REGISTRY["bpda-eot"].build(_estimator(), budget, 0)
    assert attack.eot_samples == 3


@pytest.mark.parametrize("name, cls", [("full-pgd-eot", PGDEOT), ("bpda-eot", PGDEOT), ("apgd-eot", APGDEOT)])
def test_memory_budget_reaches_the_attack_in_mib(name, cls):
    """--memory-budget -> EvalConfig.memory_budget -> Budget.memory_budget -> the attack's memory_budget, in MiB."""
    _, config, _ = cli.parse(["evaluate", "--preset", "smoke", "--memory-budget", "64"])
    assert config.memory_budget == 64
    attack = REGISTRY[name].build(_estimator(), config.budget(name), 0)
    assert type(attack) is cls and attack.memory_budget == 64
    _, default, _ = cli.parse(["evaluate", "--preset", "smoke"])
    assert REGISTRY[name].build(_estimator(), default.budget(name), 0).memory_budget is None  # the library's default


def test_a_bad_memory_budget_is_refused_with_the_configs_message(capsys):
    assert cli.main(["evaluate", "--preset", "smoke", "--memory-budget", "0"]) == 2
    err = capsys.readouterr().err
    assert "art-adp evaluate: error: memory_budget must be a number of MiB > 0 or None, got 0." in err
