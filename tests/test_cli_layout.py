"""The command line is parsing only: each subcommand is one call into art_adp.apps.commands with one settings
dataclass, whose defaults come from the library, and ``--eot`` reaches the attack under the budget's name."""

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from art_adp.apps import cli, commands
from art_adp.apps.evaluation import PRESETS
from art_adp.attacks.registry import REGISTRY
from art_adp.purify import DEFAULTS

SOURCE = Path(cli.__file__).read_text()


def _subparsers():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")  # pylint: disable=protected-access
    return action.choices


def test_cli_is_short_and_has_no_handler_over_15_lines():
    assert len(SOURCE.splitlines()) < 350
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
                              "DetectConfig", "Demo", "DemoConfig", "ScoreTraining", "ClassifierTraining",
                              "Certification", "CorruptionTable", "Evaluation", "Reproduction", "recipe_options",
                              "_split", "_training", "list", "sorted", "join", "names", "presets_text"}, node.name


@pytest.mark.parametrize("name", ["demo", "train-score", "train-classifier", "detect", "certify", "corruptions",
                                  "evaluate", "import-ncsnv2", "reproduce"])
def test_each_subcommand_is_one_call_with_one_settings_dataclass(name):
    sub = _subparsers()[name]
    run, cls = sub.get_default("run"), sub.get_default("settings_class")
    assert run.__module__ == commands.__name__ and dataclasses.is_dataclass(cls)
    (param,) = inspect.signature(run).parameters.values()
    assert param.name == "c"
    assert cls.__name__ in (param.annotation, getattr(param.annotation, "__name__", None))


def test_defaults_come_from_the_library():
    evaluate, certify = _subparsers()["evaluate"], _subparsers()["certify"]
    assert (evaluate.get_default("sigma"), evaluate.get_default("steps")) == (DEFAULTS.sigma, DEFAULTS.steps)
    assert certify.get_default("steps") == DEFAULTS.steps == commands.CorruptionTable.steps
    assert all(name in evaluate.format_help().replace("\n", "") for name in REGISTRY)


def test_eot_reaches_the_attack_under_the_budgets_name():
    """--eot -> Evaluation.eot -> EvalConfig.eot -> Budget.eot_samples -> the attack's eot_samples: four hops."""
    args = cli.build_parser().parse_args(["evaluate", "--preset", "smoke", "--eot", "3", "--batch-size", "64"])
    settings = commands.settings(args.settings_class, vars(args))
    assert isinstance(settings, commands.Evaluation) and settings.eot == 3
    config = settings.eval_config()
    assert (config.eot, config.overridden, config.preset_name) == (3, ("batch_size", "eot"), "smoke")
    budget = config.budget("bpda-eot")
    assert (budget.eot_samples, budget.batch_size, budget.max_iter) == (3, 64, PRESETS["smoke"].iterations)
    assert config.budget("apgd-eot").eot_samples == PRESETS["smoke"].apgd_eot  # APGD keeps its own count


def test_settings_fill_nested_dataclasses_and_keep_defaults_for_unset_flags():
    args = cli.build_parser().parse_args(["demo", "--eps", "0.1", "--seed", "3"])
    demo = commands.settings(args.settings_class, vars(args))
    assert (demo.settings.eps, demo.settings.seed, demo.settings.sigma) == (0.1, 3, commands.DemoConfig().sigma)
    args = cli.build_parser().parse_args(["detect", "--attacks", "blind", "--auc-eps"])
    detect = commands.settings(args.settings_class, vars(args))
    assert (detect.settings.attacks, detect.settings.auc_eps) == (("blind",), ())
    args = cli.build_parser().parse_args(["reproduce", "mnist", "--data-root", "d", "--n-bpda", "7", "--budgets", "2,4"])
    rep = commands.settings(args.settings_class, vars(args))
    assert (rep.recipe.n_bpda, rep.recipe.budgets, rep.data_root) == (7, (2, 4), "d")
