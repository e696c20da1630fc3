"""Every documented command runs: each ``docs/*_runs.sh`` script, run as its header's usage lines show it, with a
stand-in ``art-adp`` first on PATH, makes every call it names, and today's command line takes each one.

The stand-in (and ``python`` / ``python3`` stand-ins for ``python3 -m art_adp`` and the example scripts, and a ``cp``
that copies nothing: the files it copies are the earlier calls' outputs) logs its call, one line each, then asks this
test's process, which holds the package already imported (a fresh interpreter per call would take seconds), whether
the call would be refused: by the real parser (:func:`art_adp.apps.cli.parse`: flags, choices, the settings object),
and for ``levers`` by the checks ``run_levers`` makes before it reads anything (the data set's preset, its attack
rows, its σ grid's settings, its classifiers, the judges, a denoiser for the ``denoiser`` model), and, since ``levers``
never trains, whether an earlier ``train-levers`` (or ``cp``) of the script put each classifier it measures that its
preset trains into its run folder. A refused call exits
2 naming the bad argument, which stops a ``set -e`` script there; the test wants exit 0, no refusal and as many
logged calls as the script makes, so a script that stops early fails."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import shlex
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from art_adp.apps import cli, levers
from art_adp.apps.levers_classifiers import chosen_classifiers, train_levers_command
from art_adp.apps.levers_presets import JUDGES, preset_for, sigma_settings

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "docs").glob("*_runs.sh"))

#: The calls each documented run makes (its header's usage line, an environment prefix for a mode the header names),
#: by program: a script that stops early, or loses or gains a call, fails here until this table says so.
CALLS = {
    # train-denoiser; train-levers + 11 "${L[@]}", + 2 "${N[@]}", + 4 "${M[@]}", + 2 "${P[@]}", + 3 "${D[@]}"
    "mnist_levers_runs.sh MNIST_DIR": {"art-adp": 28},
    # steps 1-4: train-levers + 2, 2, 4, 1
    "fashion_mnist_runs.sh FASHION_MNIST_DIR": {"art-adp": 10},
    # train-denoiser, the classifiers, then 4 defences × 3 attack sets
    "fashion_mnist_full_strength_runs.sh FASHION_MNIST_DIR": {"art-adp": 14},
    # the base folder's classifier; a, a (rs), a (APGD) on MNIST; a, b, c, a on Fashion-MNIST
    "attack_options_runs.sh mnist MNIST_DIR mlp mn": {"art-adp": 4},
    "attack_options_runs.sh fashion-mnist FASHION_MNIST_DIR cnn fm": {"art-adp": 5},
    # the base folder's classifier (not with ESTIMATE), then d, p, e, a
    "attack_defaults_runs.sh mnist MNIST_DIR mlp mn": {"art-adp": 5},
    "attack_defaults_runs.sh fashion-mnist FASHION_MNIST_DIR cnn fm": {"art-adp": 5},
    "ESTIMATE=1 attack_defaults_runs.sh mnist MNIST_DIR mlp mn": {"art-adp": 4},
    "ESTIMATE=1 attack_defaults_runs.sh fashion-mnist FASHION_MNIST_DIR cnn fm": {"art-adp": 4},
    # the classifiers' example script; steps 1-15: 1+1+3+1+1+1+2+3+1+3+2+1+2+4+1 levers calls, 4 train-levers
    "cifar10_runs.sh CIFAR10_DIR RESNET20_TH TINIEST_DIR": {"python": 1, "art-adp": 31},
    # certify, detect (AUC), detect plain, detect two-level
    "detect_certify_runs.sh SCORE CLASSIFIER OUTDIR": {"python3": 4},
}

#: Modes a script's header names beyond its usage lines: the environment variable that turns each on.
MODES = {"attack_defaults_runs.sh": ["ESTIMATE=1"]}

USAGE = re.compile(r"^#.*?\bbash docs/(\w+_runs\.sh)\b(.*)$", re.M)


def documented_runs() -> list[str]:
    """Each script's usage lines (``#   bash docs/X_runs.sh ARGS``, optional ``[ARGS]`` left out), and each with the
    modes :data:`MODES` names, as ``[VAR=1 ]X_runs.sh ARGS``."""
    runs = []
    for script in SCRIPTS:
        for name, rest in USAGE.findall(script.read_text("utf-8")):
            assert name == script.name, f"{script.name}'s header shows {name}"
            usage = " ".join([name, *(a for a in shlex.split(rest) if not a.startswith("["))])
            runs += [usage, *(f"{mode} {usage}" for mode in MODES.get(name, []))]
    return runs


# -- what today's command line refuses ------------------------------------------------------------------------------


def levers_refusal(config, *, dataset: str, denoiser: str | None, **_) -> str | None:
    """What ``run_levers`` refuses before it reads anything, from the functions it checks with: the preset
    (:func:`preset_for` with the flags' overrides), the attack rows (``levers._rows``), the settings of the preset's σ
    grid, the classifiers of the preset, the judges, a denoiser for the ``denoiser`` model or a classifier trained
    behind it. (torchattacks for AutoAttack, a processor's bf16 and the files are the machine's, not the command's.)"""
    preset = preset_for(dataset, eps=config.eps, arch=config.arch, sigmas=config.sigmas, max_iter=config.max_iter,
                        eps_step=config.eps_step, max_epochs=config.max_epochs)  # fmt: skip
    try:
        levers._rows(preset, tuple(preset.attacks if config.attacks is None else config.attacks), config.restarts)
    except ImportError:
        pass  # torchattacks missing: the environment's
    grid = [s.name for s in sigma_settings(preset.sigmas)]
    if config.settings is not None and set(config.settings) - set(grid):
        return f"--settings {sorted(set(config.settings) - set(grid))}: not in {dataset}'s σ grid {grid}"
    classifiers = preset.baselines if config.classifiers is None else tuple(config.classifiers)
    purified = (preset.classifier,) if config.purified is None else tuple(config.purified)
    bad = sorted((set(classifiers) | set(purified)) - set(preset.classifiers))
    if bad:
        return f"--classifiers/--purified {bad}: {dataset}'s preset has {list(preset.classifiers)}"
    if set(config.judges) - set(JUDGES) or not config.judges:
        return f"--judges {config.judges}: choose from {JUDGES}"
    behind = [k for k in {*classifiers, *purified} if (own := preset.classifiers[k].purifier) and own[0] == "denoiser"]
    if ("denoiser" in config.models or behind) and denoiser is None:
        return f"--models {config.models} (classifiers {behind} behind it) without --denoiser"
    return None


def cli_refusal(argv: list[str]) -> str | None:
    """Why ``art-adp ARGV`` would be refused before it runs (None: it would run): the parser's message, or the
    settings object's or ``levers``' checks'."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            command, config, keywords = cli.parse(argv)
    except SystemExit as stop:
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else f"the parser exits {stop.code}"
    except (ValueError, TypeError) as error:  # the settings object's own checks
        return f"art-adp: error: {error}"
    try:
        why = levers_refusal(config, **keywords) if command is levers.levers_command else None
    except ValueError as error:
        why = str(error)
    return None if why is None else f"art-adp {argv[0]}: error: {why}"


def script_refusal(script: str, argv: list[str]) -> str | None:
    """A repository script run by ``python``: it exists, and each ``--flag`` given is one its parser adds."""
    path = ROOT / script
    if not path.is_file():
        return f"no script {script} in the repository"
    unknown = [a for a in argv if a.startswith("--") and f'"{a.split("=")[0]}"' not in path.read_text("utf-8")]
    return f"{script} has no flags {unknown}" if unknown else None


def refusal(prog: str, argv: list[str], held: set | None = None) -> str | None:
    """Why the stand-in's call would be refused; with ``held`` (the (folder, classifier) pairs the script's earlier
    calls put in place), also a ``levers`` call measuring a classifier its preset trains that no earlier
    ``train-levers`` (or ``cp``) put into its folder: ``levers`` never trains."""
    if prog == "cp":
        *sources, folder = argv
        (held if held is not None else set()).update((str(Path(folder)), Path(a).name.split(".")[0].rstrip("*"))
                                                     for a in sources)  # fmt: skip
        return None
    if prog == "art-adp":
        return cli_refusal(argv) or (None if held is None else untrained(argv, held))
    if argv[:2] == ["-m", "art_adp"]:
        return cli_refusal(argv[2:]) or (None if held is None else untrained(argv[2:], held))
    if argv and argv[0].endswith(".py"):
        return script_refusal(argv[0], argv[1:])
    return f"no stand-in for {prog} {shlex.join(argv)}"


def untrained(argv: list[str], held: set) -> str | None:
    """``train-levers``: the classifiers it puts into its folder (into ``held``); ``levers`` (measuring, not pricing
    or taking the zoo's): why it would be refused for a classifier its preset trains that ``held`` lacks."""
    command, config, keywords = cli.parse(argv)
    if command not in (levers.levers_command, train_levers_command):
        return None
    preset = preset_for(keywords["dataset"], eps=config.eps, arch=config.arch, sigmas=config.sigmas)
    folder, names = str(Path(keywords["run_dir"])), sum(chosen_classifiers(preset, config.classifiers,
                                                                             config.purified), ())  # fmt: skip
    if command is train_levers_command:
        held.update((folder, k) for k in names)
        return None
    if config.zoo or config.estimate_only:
        return None
    missing = [k for k in dict.fromkeys(names) if preset.classifiers[k].epochs and (folder, k) not in held]
    return f"measures {missing} in {folder}, which no earlier train-levers trained there" if missing else None


# -- the stand-ins --------------------------------------------------------------------------------------------------

STAND_IN = """#!{python} -IS
import json, os, socket, sys
prog, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["RUNS_STAND_IN_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({{"prog": prog, "argv": argv}}) + "\\n")
with socket.create_connection(("127.0.0.1", int(os.environ["RUNS_STAND_IN_PORT"]))) as s:
    s.sendall((json.dumps({{"prog": prog, "argv": argv}}) + "\\n").encode())
    why = json.loads(s.makefile(encoding="utf-8").readline())["refused"]
if why:
    print(f"{{prog}} (stand-in): {{why}}", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """A bin folder of stand-ins (``art-adp``, ``python``, ``python3``, ``cp``), the port of the server that judges
    their calls, and the list of the calls it refused."""
    monkeypatch.setattr(cli, "build_parser", functools.lru_cache(maxsize=1)(cli.build_parser))  # parsing leaves it
    refused: list[str] = []
    held: set[tuple[str, str]] = set()  # what the run's calls put into its folders (one documented run per test)

    class Judge(socketserver.StreamRequestHandler):
        def handle(self):
            call = json.loads(self.rfile.readline())
            try:
                why = refusal(call["prog"], call["argv"], held)
            except Exception as error:  # noqa: BLE001 -- a crash of the check is a refusal too, with its message
                why = f"{type(error).__name__}: {error}"
            if why:
                refused.append(f"{call['prog']} {shlex.join(call['argv'])}: {why}")
            self.wfile.write((json.dumps({"refused": why}) + "\n").encode())

    server = socketserver.TCPServer(("127.0.0.1", 0), Judge)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("art-adp", "python", "python3", "cp"):  # cp copies nothing: the judge notes what it would put where
        (bin_dir / name).write_text(STAND_IN.format(python=sys.executable))
    for stand_in in bin_dir.iterdir():
        stand_in.chmod(0o755)
    yield bin_dir, server.server_address[1], refused
    server.shutdown()
    server.server_close()


def run_documented(usage: str, bin_dir: Path, port: int, work: Path) -> tuple[subprocess.CompletedProcess, list]:
    """``bash docs/X_runs.sh ARGS`` (``usage``: ``[VAR=1 ]X_runs.sh ARGS``) in the folder ``work`` with the
    stand-ins first on PATH; its result and the calls the stand-ins logged."""
    modes, script, args = re.match(r"((?:\w+=\S+ )*)(\S+)(.*)", usage).groups()
    env = {k: v for k, v in os.environ.items() if k not in ("ESTIMATE",)}
    env.update(dict(m.split("=", 1) for m in modes.split()), LC_ALL="C.UTF-8",
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", RUNS_STAND_IN_PORT=str(port),
               RUNS_STAND_IN_LOG=str(work / "calls.jsonl"))  # fmt: skip
    work.mkdir()
    done = subprocess.run(["bash", str(ROOT / "docs" / script), *shlex.split(args)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    log = work / "calls.jsonl"
    return done, [json.loads(line) for line in log.read_text("utf-8").splitlines()] if log.exists() else []


def test_every_runs_script_shows_how_it_is_run_and_its_calls_are_counted():
    assert len(SCRIPTS) >= 7
    runs = documented_runs()
    assert {next(w for w in r.split() if w.endswith(".sh")) for r in runs} == {s.name for s in SCRIPTS}
    assert sorted(runs) == sorted(CALLS)


@pytest.mark.parametrize("usage", sorted(CALLS))
def test_every_documented_run_makes_all_its_calls_and_todays_cli_takes_each(usage, stand_ins, tmp_path):
    bin_dir, port, refused = stand_ins
    done, calls = run_documented(usage, bin_dir, port, tmp_path / "work")
    made = {prog: sum(c["prog"] == prog for c in calls) for prog in dict.fromkeys(c["prog"] for c in calls)
            if prog != "cp"}  # fmt: skip
    assert not refused, f"bash docs/{usage}: after {made} calls of {CALLS[usage]}, refused:\n" + "\n".join(refused)
    assert done.returncode == 0, f"bash docs/{usage} exits {done.returncode}: {done.stderr[-2000:]}"
    assert made == CALLS[usage], f"bash docs/{usage}: {made} calls, {CALLS[usage]} expected"


# -- the check itself -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, why",
    [
        ("levers --data-root D --attacks clean systemic-lowfreq", "--attacks: invalid choice: 'systemic-lowfreq'"),
        ("levers --data-root D --attacks clean --no-such-flag", "unrecognized arguments: --no-such-flag"),
        ("levers --data-root D --settings 'σ 0.125, one-step' --models oracle", "not in mnist's σ grid"),
        ("levers --dataset cifar10 --data-root D --models oracle --classifiers mlp", "--purified ['mlp']: cifar10's"),
        ("levers --data-root D --models denoiser --attacks clean", "without --denoiser"),
        ("levers --data-root D --models oracle --classifiers --purified cnn-denoiser", "without --denoiser"),
        ("levers --data-root D --models oracle --attacks full-pgd-eot --restarts 0", "restarts apply"),
        ("evaluate --preset strongest-ever", "argument --preset: invalid choice"),
    ],
)
def test_the_stand_in_refuses_what_the_command_would(argv, why):
    assert why in (refusal("art-adp", shlex.split(argv)) or "")


def test_the_stand_in_takes_what_the_command_would():
    assert refusal("art-adp", shlex.split("levers --data-root D --models oracle --attacks clean lowfreq-vote")) is None
    assert refusal("python3", shlex.split("-m art_adp detect --score S --classifier C --attacks --quiet")) is None
    assert refusal("python", ["examples/cifar10_classifiers.py", "--out", "runs/x", "--data-root", "D"]) is None
    assert "no flags ['--outs']" in refusal("python", ["examples/cifar10_classifiers.py", "--outs", "x"])
    assert "no stand-in" in refusal("python", ["-c", "print(1)"])
