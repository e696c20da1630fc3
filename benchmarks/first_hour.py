"""A newcomer's first hour, timed: the README's two fresh-machine commands on a fresh clone.

Clones the repository at a commit into a temporary folder, reads the two set-up commands from that clone's
README.md (the ``python3 -m venv ...`` lines, as ``tests/test_readme.py`` reads them), and runs each in its clone
with ``bash``, timing its phases separately: the installation (``venv``, ``pip install``), ``art-adp demo``, and
``python -m pytest``. With ``--load-one-core`` a busy loop pinned to one core runs throughout (a user's laptop is
never idle). Writes ``benchmarks/results/first_hour_<cpu>.json`` with its provenance: the commit, the commands, the
CPU model and its instruction sets from ``/proc/cpuinfo``, the cores, the load average around each phase.

Needs only ``python3``, ``git`` and ``bash`` (no art-adp, no torch), and the network for ``pip``; takes 10-20
minutes on a 2-core machine. ``--smoke`` runs the same clone, parsing, phase splitting, timing and load process with
every command replaced by ``true`` (a few seconds), to check the benchmark itself::

    python benchmarks/first_hour.py --load-one-core                # the commit checked out here
    python benchmarks/first_hour.py --commit 2bed939 --cpu-torch   # torch's CPU build first (README's note)
    python benchmarks/first_hour.py --smoke --load-one-core --out /tmp/first_hour_smoke.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Instruction sets that decide how fast torch runs on a CPU (bf16 is emulated without avx512_bf16 or amx_bf16).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# The README's note on torch's CPU build: run inside the venv before either command.
CPU_TORCH = re.compile(r"```bash\n(pip install torch\S* .*--index-url https://download\.pytorch\.org/whl/cpu)\n```")
MARK = "__first_hour__"


def setup_commands(readme: str) -> list[str]:
    """The README's fresh-machine commands (the ``bash`` blocks starting ``python3 -m venv``), in order."""
    return re.findall(r"```bash\n(python3 -m venv .*)\n```", readme)


def phases(command: str) -> list[tuple[str, list[str]]]:
    """Split one ``a && b && c`` command into timed phases: each ``art-adp X`` step is phase ``X``, each
    ``python -m pytest`` step is ``pytest``, and the steps before them (venv, activation, pip) are ``install``.

    :param command: One of :func:`setup_commands`.
    :return: ``[(phase name, [shell steps]), ...]``, consecutive install steps in one phase.
    """
    out: list[tuple[str, list[str]]] = []
    for step in (s.strip() for s in command.split("&&")):
        words = shlex.split(step)
        if words[:1] == ["art-adp"]:
            name = words[1] if len(words) > 1 else "art-adp"
        elif words[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]) or words[:1] == ["pytest"]:
            name = "pytest"
        else:
            name = "install"
        if out and out[-1][0] == name == "install":
            out[-1][1].append(step)
        else:
            out.append((name, [step]))
    return out


def with_cpu_torch(command: str, cpu_torch: str) -> str:
    """``command`` with the README's CPU-torch step right after the venv's activation."""
    activate = ". .venv/bin/activate"
    if activate not in command:
        raise SystemExit(f"--cpu-torch: no `{activate}` in `{command}`")
    return command.replace(activate, f"{activate} && {cpu_torch}", 1)


def script(steps: list[tuple[str, list[str]]], *, smoke: bool) -> str:
    """A bash script running the phases in one shell (the venv's activation carries over), printing a marker line
    with the time at each phase's start and end; it stops at the first failing step."""
    lines = ["set -e", f'mark() {{ echo "{MARK} $1 $2 $(date +%s.%N)"; }}']
    for i, (name, cmds) in enumerate(steps):
        lines.append(f"mark {i}:{name} start")
        lines += [f"true {shlex.quote(c)}" if smoke else c for c in cmds]
        lines.append(f"mark {i}:{name} end")
    return "\n".join(lines) + "\n"


def timings(stdout: str) -> dict[str, float]:
    """``{phase: seconds}`` from the marker lines of :func:`script`'s output (phases that started but did not end
    are left out)."""
    starts: dict[str, float] = {}
    out: dict[str, float] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == MARK:
            if parts[2] == "start":
                starts[parts[1]] = float(parts[3])
            elif parts[1] in starts:
                out[parts[1]] = round(float(parts[3]) - starts[parts[1]], 1)
    return out


def cpu_description() -> dict:
    """The CPU model, the instruction sets of :data:`ISA_FLAGS` it has, and the cores this process may use."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", text, re.M).group(1).strip()  # type: ignore[union-attr]
        flags = set(re.search(r"^flags\s*:\s*(.+)$", text, re.M).group(1).split())  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model, "isa": [f for f in ISA_FLAGS if f in flags], "cores": os.cpu_count(),
            "cores_usable": usable, "machine": platform.machine()}  # fmt: skip


def busy_loop() -> subprocess.Popen:
    """A process spinning on one core (the last one this process may use), as another job on a user's machine."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    code = f"import os\nif hasattr(os, 'sched_setaffinity'): os.sched_setaffinity(0, {{{cores[-1]}}})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "cpu"


def run(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="first_hour_"))
    load = busy_loop() if args.load_one_core else None
    try:
        clone = work / "clone"
        t = time.perf_counter()
        subprocess.run(["git", "clone", "-q", str(args.repo), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.commit], check=True)
        commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()  # fmt: skip
        clone_s = time.perf_counter() - t
        readme = (clone / "README.md").read_text(encoding="utf-8")
        commands = setup_commands(readme)
        if len(commands) != 2:
            raise SystemExit(f"README.md at {commit[:9]} has {len(commands)} set-up commands, not 2: {commands}")
        cpu_torch = CPU_TORCH.search(readme)
        if args.cpu_torch and not cpu_torch:
            raise SystemExit("--cpu-torch: README.md names no `pip install torch ... --index-url .../whl/cpu` command")
        env = {**os.environ, "PIP_CACHE_DIR": str(work / "pip-cache")} if not args.warm_pip_cache else dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        runs = []
        for which, command in zip(("demo command", "test command"), commands):
            if args.cpu_torch and which == "demo command":  # inside the venv, before the first pip install
                command = with_cpu_torch(command, cpu_torch.group(1))  # type: ignore[union-attr]
            steps = phases(command)
            load_before = os.getloadavg()[0]
            done = subprocess.run(["bash", "-c", script(steps, smoke=args.smoke)], cwd=clone, env=env,
                                  capture_output=True, text=True)  # fmt: skip
            record = {"command": command, "phases": [[n, c] for n, c in steps], "seconds": timings(done.stdout),
                      "returncode": done.returncode, "load_avg_1min": [load_before, os.getloadavg()[0]],
                      "output_tail": [ln for ln in done.stdout.splitlines() if not ln.startswith(MARK)][-25:]}
            if done.returncode:
                record["stderr_tail"] = done.stderr.splitlines()[-25:]
            runs.append(record)
            print(f"{which}: {record['seconds']} (exit {done.returncode})", flush=True)
            if done.returncode:
                break
    finally:
        if load is not None:
            load.kill()
            load.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    cpu = cpu_description()
    threads = os.environ.get("OMP_NUM_THREADS")
    seconds = [r["seconds"] for r in runs]
    summary = {f"{n.split(':')[1]} ({which})" if n.endswith("install") else n.split(":")[1]: s
               for which, sec in zip(("demo command", "test command"), seconds) for n, s in sec.items()}
    return {
        "smoke": args.smoke,
        "seconds": summary,
        "commit": commit,
        "clone_s": round(clone_s, 1),
        "runs": runs,
        "load": {"busy_loop_on_one_core": args.load_one_core, "fresh_pip_cache": not args.warm_pip_cache,
                 "cpu_torch_first": args.cpu_torch},  # fmt: skip
        "cpu": cpu,
        "provenance": {
            "command": " ".join(["python", *sys.argv]),
            "code_version": f"art-adp {commit[:9]}",
            "models": {},  # it times commands; the models the demo trains are not kept
            "device": f"CPU {cpu['model']} ({', '.join(cpu['isa']) or 'no AVX2'}), {cpu['cores_usable']} of "
            f"{cpu['cores']} cores usable, OMP_NUM_THREADS={threads or 'unset'}, Python {platform.python_version()}",
            "wall_time_s": round(time.perf_counter() - start, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=str(ROOT), help="repository to clone (default: this one)")
    p.add_argument("--commit", default="HEAD", help="commit to check out in the clone (default: HEAD)")
    p.add_argument("--load-one-core", action="store_true", help="a busy loop pinned to one core throughout")
    p.add_argument("--cpu-torch", action="store_true", help="install torch's CPU build first, as the README says")
    p.add_argument("--warm-pip-cache", action="store_true", help="use pip's own cache (default: an empty one)")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone and its venv")
    p.add_argument("--smoke", action="store_true", help="replace every command by `true`: checks this script")
    p.add_argument("--out", help="JSON file (default: benchmarks/results/first_hour_<cpu>.json; smoke: not written)")
    args = p.parse_args(argv)
    result = run(args)
    default = ROOT / "benchmarks" / "results" / f"first_hour_{slug(result['cpu']['model'])}.json"
    out = args.out or (None if args.smoke else default)
    print(json.dumps(result["seconds"]))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    return 0 if all(r["returncode"] == 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
