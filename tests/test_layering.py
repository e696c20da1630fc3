"""The package's layering, read from the source: the library never imports the applications (``art_adp.apps``) or
their run-folder plumbing (``art_adp.runs``), ``runs`` never imports ``apps``, every import resolves, and neither
two packages nor any circle of modules import each other. Every import statement counts, inside functions and
module-level ``__getattr__`` (lazy attributes) too."""

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "art_adp"


#: A module's syntax tree, parsed once a process (the checks and their planted variants read the same sources).
_parse = functools.cache(ast.parse)


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, package: str) -> list[tuple[str, int]]:
    """Absolute names imported by the module ``source`` of ``package`` with their line: every import statement,
    at module level or inside a function -- a module-level ``__getattr__`` (a lazy attribute) included."""
    tree = _parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _from(node, package)
            out.append((module, node.lineno))
            out += [(f"{module}.{a.name}", node.lineno) for a in node.names if _exists(f"{module}.{a.name}")]
    return [(m, line) for m, line in out if m == "art_adp" or m.startswith("art_adp.")]


def _from(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a ``from ... import`` statement of ``package`` reads."""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _exists(module: str) -> bool:
    path = ROOT.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


MODULES = {_name(p): p for p in sorted(ROOT.rglob("*.py"))}
EDGES = {
    name: _imports(path.read_text(), name if path.name == "__init__.py" else name.rpartition(".")[0])
    for name, path in MODULES.items()
}


def _layer(module: str) -> str:
    if module == "art_adp.__main__":  # python -m art_adp: the command line's entry point
        return "art_adp.apps"
    for layer in ("art_adp.apps", "art_adp.runs"):
        if module == layer or module.startswith(layer + "."):
            return layer
    return "library"


def test_every_internal_import_resolves():
    missing = [f"{m}:{line} imports {t}" for m, edges in EDGES.items() for t, line in edges if not _exists(t)
               and not _exists(t.rpartition(".")[0])]
    assert missing == []


FORBIDDEN = {"library": ("art_adp.apps", "art_adp.runs"), "art_adp.runs": ("art_adp.apps",)}


def _upward(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Every import of a module from a layer below it: the library importing ``apps`` or ``runs``, ``runs``
    importing ``apps``."""
    return [f"{m}:{line} imports {t}" for m, found in edges.items() for t, line in found
            if t.startswith(FORBIDDEN.get(_layer(m), ("-",)))]


def test_no_upward_import():
    assert _upward(EDGES) == []


def _module_of(name: str) -> str:
    """The module an imported name lives in: ``art_adp.purification.purify`` -> ``art_adp.purification``."""
    return name if name in MODULES else name.rpartition(".")[0] if name.rpartition(".")[0] in MODULES else name


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """The circles of a directed graph (each found from its smallest node, so listed once)."""
    found = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                found.append(" -> ".join(path + [nxt]))
            elif nxt not in path and nxt > path[0]:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    return found


def _module_graph(edges: dict[str, list[tuple[str, int]]]) -> dict[str, set[str]]:
    """Module -> the modules it imports, leaving out a module's own parent packages (Python imports those first
    whatever the module says, so ``from . import sigmas`` inside ``art_adp.score.train`` is no circle)."""
    graph: dict[str, set[str]] = {}
    for m, found in edges.items():
        for t, _ in found:
            target = _module_of(t)
            if target != m and not m.startswith(target + "."):
                graph.setdefault(m, set()).add(target)
    return graph


def test_no_circle_between_modules():
    assert _cycles(_module_graph(EDGES)) == []


def _unit(module: str) -> str:
    """The package-level unit of a module: ``art_adp.apps.evaluation.run`` -> ``art_adp.apps.evaluation``,
    ``art_adp.purification`` -> itself."""
    parts = module.split(".")
    while len(parts) > 2 and not (ROOT.parent.joinpath(*parts[:-1]) / "__init__.py").exists():
        parts = parts[:-1]
    name = ".".join(parts)
    return name if (ROOT.parent.joinpath(*parts) / "__init__.py").exists() else name.rpartition(".")[0] if len(
        parts) > 2 else name


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for m, edges in EDGES.items():
        if m == "art_adp":  # the public API re-exports everything below it
            continue
        for t, _ in edges:
            a, b = _unit(m), _unit(t)
            if a != b and b != "art_adp" and not a.startswith(b + ".") and not b.startswith(a + "."):
                graph.setdefault(a, set()).add(b)
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif len(path) < 12:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert cycles == []


def test_the_layering_check_sees_an_upward_import():
    """The check itself: relative and absolute imports of the harness from a library module are found, and so is
    the same import inside a module-level ``__getattr__`` (a lazy attribute is an arrow like any other)."""
    source = (
        "import torch\nfrom ..apps.evaluation import run\nimport art_adp.runs.records\n"
        "def __getattr__(name):\n    from ..apps import cli\n"
    )
    found = _imports(source, "art_adp.attacks")
    assert sorted(found) == [("art_adp.apps", 5), ("art_adp.apps.cli", 5), ("art_adp.apps.evaluation", 2),
                             ("art_adp.apps.evaluation.run", 2), ("art_adp.runs.records", 3)]
    assert _layer("art_adp.attacks.pgd_eot") == "library" and _layer("art_adp.runs.records") == "art_adp.runs"
    assert _unit("art_adp.apps.evaluation.run") == "art_adp.apps.evaluation"
    assert _unit("art_adp.purification") == "art_adp.purification"


def test_a_planted_lazy_getattr_importing_upward_fails_the_checks():
    """A library module with only a module-level ``__getattr__`` that imports an application (what
    ``certification.run_certify`` and ``art_adp.evaluate`` were) is an upward arrow and, with the application importing
    the module back, a circle."""
    planted = "def __getattr__(name):\n    from .apps.certify_run import run_certify\n    return run_certify\n"
    edges = dict(EDGES, **{"art_adp.certification": EDGES["art_adp.certification"] + _imports(planted, "art_adp")})
    assert _upward(edges) == ["art_adp.certification:2 imports art_adp.apps.certify_run"]
    circle = "art_adp.apps.certify_run -> art_adp.certification -> art_adp.apps.certify_run"
    assert circle in _cycles(_module_graph(edges))


def test_the_detector_pieces_still_import_from_the_demo_module():
    from art_adp.apps.detect_demo import EvadeDetectorLoss, ScoreNormHead
    from art_adp.attacks import EvadeDetectorLoss as Loss
    from art_adp.detect import ScoreNormHead as Head

    assert (EvadeDetectorLoss, ScoreNormHead) == (Loss, Head)


MAX_FUNCTION_LINES = 80


def _long_functions(source: str, module: str) -> list[str]:
    """Functions and methods of ``source`` longer than :data:`MAX_FUNCTION_LINES`, signature and docstring
    included."""
    return [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(_parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_library_function_is_over_80_lines():
    """The library (everything outside ``art_adp.apps``) splits a function where a reader would lose the thread."""
    long = [f for name, path in MODULES.items() if _layer(name) != "art_adp.apps"
            for f in _long_functions(path.read_text(), name)]
    assert long == []
    planted = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES  # the check itself: 81 lines are found
    assert _long_functions(planted, "m") == ["m.f: 81 lines"]


#: The longest module an application may be: past it, a command holds more than one concept (split it by concept).
MAX_APP_MODULE_LINES = 600


def test_no_application_module_is_over_600_lines():
    """Each module of ``art_adp.apps`` holds one concept of its command (its presets, its classifiers, its table...),
    short enough to read in one sitting."""
    long = {name: n for name, path in MODULES.items() if _layer(name) == "art_adp.apps"
            and (n := len(path.read_text().splitlines())) > MAX_APP_MODULE_LINES}  # fmt: skip
    assert long == {}
    assert len(MODULES["art_adp.apps.levers"].read_text().splitlines()) > MAX_APP_MODULE_LINES // 2  # counted


#: Names of functions that compute an interval for a proportion (Wilson, Clopper-Pearson, Agresti-Coull, Jeffreys...).
INTERVAL_FUNCTION = re.compile(r"wilson|clopper|pearson|confint|agresti|jeffreys|binom", re.IGNORECASE)
#: What computes one inside a function: a distribution's quantile (scipy's ``.ppf``/``.isf``), an interval helper
#: (scipy's ``binomtest(...).proportion_ci``, statsmodels' ``proportion_confint``), the normal quantile written out.
INTERVAL_MACHINERY = frozenset({"ppf", "isf", "binomtest", "binom_test", "proportion_ci", "proportion_confint"})
STATISTICS = "art_adp.runs.statistics"
#: The modules that may compute one: the one accuracy interval, and certification's exact (Clopper-Pearson) bound and
#: its radius Φ⁻¹(p_A), which the certificate's guarantee needs.
INTERVAL_MODULES = {STATISTICS, "art_adp.certification"}
#: The functions outside :data:`STATISTICS` that call its interval or its judgements directly, not through its
#: ``summary``: each with why (a second summary would be one more here).
DIRECT_CALLERS = {
    "art_adp.apps.evaluation.report.eps_curves": "the sanity curve's points, kept in the card as proportions",
}


def _interval_code(source: str) -> list[str]:
    """What in ``source`` computes an interval for a proportion: a function named like one, a quantile or interval
    helper of scipy or statsmodels, the normal quantile 1.96 written out."""
    found = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and INTERVAL_FUNCTION.search(node.name):
            found.append(f"def {node.name}")
        elif isinstance(node, ast.Attribute) and node.attr in INTERVAL_MACHINERY:
            found.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in INTERVAL_MACHINERY:
            found.append(node.id)
        elif isinstance(node, ast.alias) and node.name in INTERVAL_MACHINERY:
            found.append(f"import {node.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, float) and abs(node.value - 1.96) < 0.005:
            found.append(repr(node.value))
    return found


def _statistics_callers(source: str, module: str) -> list[str]:
    """The functions of ``module`` that call :data:`STATISTICS`' ``wilson``, ``judgements`` or ``majority_correct``,
    imported by name or reached through the module, as ``module.function``."""
    package = module if MODULES.get(module, Path()).name == "__init__.py" else module.rpartition(".")[0]
    tree, direct = _parse(source), {"wilson", "judgements", "majority_correct"}
    names, modules = set(), {STATISTICS}  # names bound to the functions; to the module
    for node in ast.walk(tree):
        for alias in node.names if isinstance(node, (ast.Import, ast.ImportFrom)) else ():
            origin = f"{_from(node, package)}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
            if origin in {f"{STATISTICS}.{name}" for name in direct}:
                names.add(alias.asname or alias.name)
            elif origin == STATISTICS:
                modules.add(alias.asname or (alias.name if isinstance(node, ast.Import) else "statistics"))
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and (
                    (isinstance(child.func, ast.Name) and child.func.id in names)
                    or (isinstance(child.func, ast.Attribute) and child.func.attr in direct
                        and ast.unparse(child.func.value) in modules)):  # fmt: skip
                found.append(where)
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            visit(child, f"{where}.{child.name}" if named else where)

    visit(tree, module)
    return sorted(set(found))


def _second_intervals_and_summaries(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (module name → source) holds a second accuracy interval or a second summary: interval code
    outside :data:`INTERVAL_MODULES`, any interval function in :data:`STATISTICS` but ``wilson``, a direct call of the
    interval or the judgements outside :data:`STATISTICS` and :data:`DIRECT_CALLERS`."""
    problems = [f"{m}: {', '.join(found)}" for m, source in sources.items()
                if m not in INTERVAL_MODULES and (found := _interval_code(source))]  # fmt: skip
    defined = sorted(f for f in _interval_code(sources[STATISTICS]) if f.startswith("def "))
    if defined != ["def wilson"]:
        problems.append(f"{STATISTICS} defines {defined}: one interval function (wilson)")
    problems += [f"{f} calls the interval or the judgements, not runs.statistics.summary"
                 for m, source in sources.items() if m != STATISTICS
                 for f in _statistics_callers(source, m) if f not in DIRECT_CALLERS]  # fmt: skip
    return problems


SOURCES = {name: path.read_text() for name, path in MODULES.items()}


def test_one_function_computes_accuracy_intervals_and_one_summary():
    """Every accuracy's interval is :func:`art_adp.runs.statistics.wilson`, reached through the one summary of a cell
    (:func:`~art_adp.runs.statistics.summary`): no other module computes an interval for a proportion (certification
    keeps its exact bound, which its guarantee needs), and no function outside ``runs.statistics`` judges R
    predictions or calls the interval itself but those :data:`DIRECT_CALLERS` names."""
    assert _second_intervals_and_summaries(SOURCES) == []
    for caller in DIRECT_CALLERS:  # each still calls it (else it goes from the list)
        module, _, _ = caller.rpartition(".")
        assert caller in _statistics_callers(SOURCES[module], module)


def test_a_planted_second_interval_or_summary_fails():
    """The check itself: a second interval function (the card's former Clopper-Pearson beside Wilson, or a Wilson
    written out with 1.96) and a second summary (the card's former ``summarize``, judging R predictions itself) are
    found, wherever they are planted."""
    clopper = ("from scipy.stats import beta\n\ndef clopper_pearson(k, n):\n"
               "    return beta.ppf(0.025, k, n - k + 1), beta.ppf(0.975, k + 1, n - k)\n")  # fmt: skip
    wilson = "import math\n\ndef interval(p, n):\n    return p - 1.96 * math.sqrt(p * (1 - p) / n)\n"
    summarize = ("from ...runs.statistics import judgements, wilson\n\ndef summarize(rows):\n"
                 "    return judgements(rows), wilson(judgements(rows)['mean'], len(rows))\n")  # fmt: skip
    via_module = "from ...runs import statistics as st\n\ndef table(rows):\n    return st.wilson(0.5, len(rows))\n"
    report = "art_adp.apps.evaluation.report"
    assert _second_intervals_and_summaries(dict(SOURCES, **{STATISTICS: SOURCES[STATISTICS] + clopper})) == [
        f"{STATISTICS} defines ['def clopper_pearson', 'def wilson']: one interval function (wilson)"]
    assert _second_intervals_and_summaries(dict(SOURCES, **{report: SOURCES[report] + clopper})) == [
        f"{report}: def clopper_pearson, .ppf, .ppf"]
    assert _second_intervals_and_summaries(dict(SOURCES, **{"art_adp.apps.check": SOURCES["art_adp.apps.check"]
                                                            + wilson})) == ["art_adp.apps.check: 1.96"]  # fmt: skip
    assert _second_intervals_and_summaries(dict(SOURCES, **{report: SOURCES[report] + summarize})) == [
        f"{report}.summarize calls the interval or the judgements, not runs.statistics.summary"]
    assert _second_intervals_and_summaries(dict(SOURCES, **{report: SOURCES[report] + via_module})) == [
        f"{report}.table calls the interval or the judgements, not runs.statistics.summary"]


#: The one cost estimate (issue 70): a plan's cells priced at a timed probe of their targets -- a cell's price as data
#: (``Price``), its seconds per image (``unit_seconds``), the plan's seconds (``estimate``).
COST_MODULE = "art_adp.runs.engine"
COST_DEFINITIONS = ["Price", "estimate", "unit_seconds"]
#: The attack registry's cost model: each attack's purification passes at its budget (an ``AttackSpec.cost``, and the
#: ``*_cost`` functions its entries share), which the one estimate prices: a model per attack, not a run's estimate.
COST_MODEL = "art_adp.attacks.registry"
#: Names of what estimates a cost: ``estimate``, ``*_estimate``, ``*_cost``, ``*_seconds``, ``price_*`` (``Price``).
COST_NAME = re.compile(r"(^|_)(estimate|cost|seconds|price)s?($|_)", re.IGNORECASE)
#: What computes one inside a function: the registry's cost model (``spec.cost(...)``) or the engine's seconds per image
#: (``unit_seconds(...)``) called, a probe's timings read (``probe["forward"]``, ``probe["full"]``).
COST_CALLS = frozenset({"cost", "unit_seconds"})
PROBE_TIMINGS = frozenset({"forward", "full"})
#: The functions outside :data:`COST_MODULE` and :data:`COST_MODEL` named like a cost or reading a probe's timings,
#: each with why: none computes seconds (a second estimator would be one more here).
COST_EXCEPTIONS = {
    "art_adp.apps.evaluation.run._log_estimate": "logs the engine's estimate and the probe's timings it was priced at",
    "art_adp.apps.evaluation.run.price_of": "the evaluation's cells' prices as data (an engine.Price each)",
    "art_adp.apps.levers._write_estimate": "prints and writes the engine's estimate, a line per row",
    "art_adp.preprocessor.PurifierPyTorch.estimate_forward": "ART's preprocessor interface: a forward pass, no cost",
}


def _cost_code(source: str, module: str) -> list[tuple[str, str]]:
    """What in ``source`` estimates a cost, as ``(where, what)``: a function or class named like one (where: itself,
    ``module.Class.function``), a call of a cost model or of the engine's seconds per image, a probe's timing read
    (where: the function it is in)."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else None
            inner = where if name is None else f"{where}.{name}"
            if name is not None and COST_NAME.search(name):
                found.append((inner, f"def {name}"))
            elif isinstance(child, ast.Call) and (
                    (isinstance(child.func, ast.Name) and child.func.id in COST_CALLS)
                    or (isinstance(child.func, ast.Attribute) and child.func.attr in COST_CALLS)):  # fmt: skip
                found.append((where, f"{ast.unparse(child.func)}(...)"))
            elif (isinstance(child, ast.Subscript) and isinstance(child.slice, ast.Constant)
                  and child.slice.value in PROBE_TIMINGS):  # fmt: skip
                found.append((where, ast.unparse(child)))
            visit(child, inner)

    visit(_parse(source), module)
    return found


def _second_cost_estimators(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (module name → source) holds a second cost estimator: :data:`COST_MODULE` defining more or
    other than :data:`COST_DEFINITIONS`, :data:`COST_MODEL` anything but its ``*_cost`` entries, any other module
    cost code outside :data:`COST_EXCEPTIONS`."""
    problems = []
    defined = sorted(what[4:] for _, what in _cost_code(sources[COST_MODULE], COST_MODULE) if what.startswith("def "))
    if defined != COST_DEFINITIONS:
        problems.append(f"{COST_MODULE} defines {defined}: one estimate {COST_DEFINITIONS}")
    problems += [f"{where}: {what}" for where, what in _cost_code(sources[COST_MODEL], COST_MODEL)
                 if not (what.startswith("def ") and what.endswith("_cost"))]  # fmt: skip
    problems += [f"{where}: {what}" for m, source in sources.items() if m not in (COST_MODULE, COST_MODEL)
                 for where, what in _cost_code(source, m) if where not in COST_EXCEPTIONS]  # fmt: skip
    return problems


def test_one_estimator_prices_every_run():
    """Every command's time estimate -- ``art-adp evaluate`` (its log, ``--estimate-only``), ``levers
    --estimate-only`` -- is :func:`art_adp.runs.engine.estimate`, each cell's :class:`~art_adp.runs.engine.Price` at a
    timed probe: no other module prices a run from the attacks' cost model or a probe's timings, and those outside it
    named like a cost are the views and data :data:`COST_EXCEPTIONS` names."""
    assert _second_cost_estimators(SOURCES) == []
    for where in COST_EXCEPTIONS:  # each is still there (else it goes from the list)
        module = next(m for m in sorted(SOURCES, key=len, reverse=True) if where.startswith(m + "."))
        assert where in {w for w, _ in _cost_code(SOURCES[module], module)}, where


def test_a_planted_second_cost_estimator_fails():
    """The check itself: the evaluation's former estimator (``estimate`` over units, ``_unit_cost`` per image), the
    same under names that say nothing, a second estimate in the engine and one in the registry are found."""
    former = (
        'def _unit_cost(setting, attack, c, probe):\n    f, b = probe["forward"], probe["full"]\n'
        "    return unit_seconds(attack, c.budget(attack), c.ensemble_size * c.repeats, probe)\n\n"
        "def estimate(units, c, probe):\n    return sum(_unit_cost(s, a, c, probe) * len(ch) for s, a, ch in units)\n"
    )
    renamed = (
        "def how_long(units, c, p):\n"
        "    return sum(REGISTRY[a].cost(c.budget(a), p['forward'], p['full']) * len(ch) for _, a, ch in units)\n"
    )
    second = "def estimate_units(units, probe):\n    return sum(len(ch) for _, _, ch in units) * probe['forward']\n"
    run, check = "art_adp.apps.evaluation.run", "art_adp.apps.check"
    assert _second_cost_estimators(dict(SOURCES, **{run: SOURCES[run] + former})) == [
        f"{run}._unit_cost: def _unit_cost",
        f"{run}._unit_cost: probe['forward']",
        f"{run}._unit_cost: probe['full']",
        f"{run}._unit_cost: unit_seconds(...)",
        f"{run}.estimate: def estimate",
    ]
    assert _second_cost_estimators(dict(SOURCES, **{check: SOURCES[check] + renamed})) == [
        f"{check}.how_long: REGISTRY[a].cost(...)",
        f"{check}.how_long: p['forward']",
        f"{check}.how_long: p['full']",
    ]
    assert _second_cost_estimators(dict(SOURCES, **{COST_MODULE: SOURCES[COST_MODULE] + second})) == [
        f"{COST_MODULE} defines ['Price', 'estimate', 'estimate_units', 'unit_seconds']: one estimate {COST_DEFINITIONS}"
    ]
    assert _second_cost_estimators(dict(SOURCES, **{COST_MODEL: SOURCES[COST_MODEL] + second})) == [
        f"{COST_MODEL}.estimate_units: def estimate_units",
        f"{COST_MODEL}.estimate_units: probe['forward']",
    ]


#: The one builder of a :class:`~art_adp.attacks.registry.Budget` (issue 70): a plan's values plus what is given over
#: them. The evaluate command (``EvalConfig.budget``), the Python entry point (a preset, or ``ENTRY_POINT``), the lever
#: rows, the MNIST recipe and the baselines' white-box PGD all reach it.
BUDGET_BUILDER = "art_adp.runs.plans.budget"
#: The other functions that may construct a ``Budget``, each with why: none (``migrate`` and ``rejudge`` read a
#: recorded budget as data; one constructed again from a record would be listed here).
BUDGET_EXCEPTIONS: dict[str, str] = {}


def _budget_constructions(source: str, module: str) -> list[str]:
    """Where ``source`` constructs a ``Budget``: a call of it by name, under an import's other name
    (``import Budget as B``) or as an attribute (``registry.Budget(...)``), as ``module.function`` (the module at its
    top level)."""
    tree = _parse(source)
    names = {"Budget"} | {alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                          for alias in node.names if alias.name == "Budget" and alias.asname}  # fmt: skip
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and (
                    (isinstance(child.func, ast.Name) and child.func.id in names)
                    or (isinstance(child.func, ast.Attribute) and child.func.attr == "Budget")):  # fmt: skip
                found.append(where)
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            visit(child, f"{where}.{getattr(child, 'name')}" if named else where)

    visit(tree, module)
    return found


def _second_budget_builders(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (module name → source) constructs a ``Budget`` outside :data:`BUDGET_BUILDER` and
    :data:`BUDGET_EXCEPTIONS`, or the builder constructs none or several."""
    found = [where for m, source in sources.items() for where in _budget_constructions(source, m)]
    problems = [f"{where} constructs a Budget, not {BUDGET_BUILDER}" for where in found
                if where != BUDGET_BUILDER and where not in BUDGET_EXCEPTIONS]  # fmt: skip
    if found.count(BUDGET_BUILDER) != 1:
        problems.append(f"{BUDGET_BUILDER} constructs {found.count(BUDGET_BUILDER)} Budgets: one")
    return problems


def test_one_function_builds_every_budget():
    """Every attack's budget, in every command and the Python entry point, is built by :func:`art_adp.runs.plans.budget`
    from a plan's values and what is given over them: no other function of the package constructs a ``Budget``."""
    assert _second_budget_builders(SOURCES) == []
    for where in BUDGET_EXCEPTIONS:  # each still constructs one (else it goes from the list)
        module = next(m for m in sorted(SOURCES, key=len, reverse=True) if where.startswith(m + "."))
        assert where in _budget_constructions(SOURCES[module], module), where


def test_a_planted_second_budget_builder_fails():
    """The check itself: the lever rows' former builder, the entry point's former defaults, a budget built at a module's
    top level under another name and a second builder beside the one are found."""
    white = ("def _row_budget(r, eps):\n    return Budget(eps=eps * r.eps_scale, eps_step=r.eps_step, "
             "max_iter=r.max_iter, random_start=r.random_start, batch_size=250)\n")  # fmt: skip
    defaults = ("from ..attacks import registry\n\ndef _defaults(names, eps):\n    return {a: registry.Budget("
                "eps=eps, eps_step=eps / 4, max_iter=100, eot_samples=8) for a in names}\n")  # fmt: skip
    aliased = "from ..attacks.registry import Budget as B\n\nDEFAULT = B(eps=8 / 255, eps_step=2 / 255, max_iter=40)\n"
    second = "def budget_of(attack, values):\n    return Budget(**values)\n"
    levers, engine, check, plans = ("art_adp.apps.levers_presets", "art_adp.runs.engine", "art_adp.apps.check",
                                    "art_adp.runs.plans")  # fmt: skip

    def planted(module: str, source: str) -> list[str]:
        return _second_budget_builders(dict(SOURCES, **{module: source}))

    not_the_one = f"constructs a Budget, not {BUDGET_BUILDER}"
    assert planted(levers, SOURCES[levers] + white) == [f"{levers}._row_budget {not_the_one}"]
    assert planted(engine, SOURCES[engine] + defaults) == [f"{engine}._defaults {not_the_one}"]
    assert planted(check, SOURCES[check] + aliased) == [f"{check} {not_the_one}"]
    assert planted(plans, SOURCES[plans] + second) == [f"{plans}.budget_of {not_the_one}"]
    unbuilt = SOURCES[plans].replace("return Budget(", "return dict(")
    assert planted(plans, unbuilt) == [f"{BUDGET_BUILDER} constructs 0 Budgets: one"]


#: The one S-run ensemble (issue 70): :class:`~art_adp.DefendedModel` draws S purifications of a batch and aggregates
#: the classifier's outputs (``art_adp.ensemble``'s ``stack_draws`` and ``aggregate_draws``); an application
#: (``art_adp.apps``) predicts through it, with what varies per call (a generator, a σ per input) in its purifier.
ENSEMBLE_PIECES = frozenset({"aggregate_draws", "stack_draws"})
#: Callees that purify, by their name's last part (``purify``, a ``purifier`` or its ``forward``, a diagnostic
#: ``transform``, one draw's ``draw_logits``), and callees that classify (a ``classifier``, a softmax, logits).
PURIFYING = re.compile(r"(^|\.)(purify|purifier|purifier\.forward|transform|draw_logits)$")
CLASSIFYING = re.compile(r"(^|\.)(classifier|softmax|log_softmax|logits|draw_logits)$")
#: The functions of ``art_adp.apps`` that may assemble an ensemble of their own, each with why: none.
ENSEMBLE_EXCEPTIONS: dict[str, str] = {}


def _callee(func: ast.expr) -> str:
    """The name a call is made by: ``purify``, ``torch.softmax``, ``self.purifier.forward``, ``classifiers`` for
    ``classifiers[k](x)``; none for a call's result called (``DefendedModel(clf, purifier)(x)``: the model)."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        inner = _callee(func.value)
        return f"{inner}.{func.attr}" if inner else func.attr
    return _callee(func.value) if isinstance(func, ast.Subscript) else ""


def _loop_body(node: ast.AST) -> list[ast.AST]:
    """What a loop repeats: a ``for``'s or ``while``'s statements, a comprehension's all but its first iterable."""
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return [*node.body, *node.orelse]
    first = node.generators[0]  # type: ignore[attr-defined]
    parts = [getattr(node, f) for f in ("elt", "key", "value") if hasattr(node, f)]
    return parts + [*first.ifs, *node.generators[1:]]  # type: ignore[attr-defined]


def _own_ensembles(source: str, module: str) -> list[str]:
    """Where ``source`` assembles an S-run ensemble of its own, as ``module.function: what``: a call of the ensemble's
    pieces (:data:`ENSEMBLE_PIECES`, under any name it is imported as), or a loop (``for``, ``while``, a comprehension)
    that both purifies and classifies (:data:`PURIFYING`, :data:`CLASSIFYING`) -- a batch loop predicting one draw
    at a time is the ensemble with S = 1 (``DefendedModel(..., ensemble_size=1)``)."""
    tree = _parse(source)
    pieces = {alias.asname or alias.name: alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
              for alias in node.names if alias.name in ENSEMBLE_PIECES}  # fmt: skip
    loops = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                name = _callee(child.func)
                piece = pieces.get(name) or (name.rpartition(".")[2] if "." in name else None)
                if piece in ENSEMBLE_PIECES:
                    found.append(f"{where}: {piece}(...)")
            if isinstance(child, loops):
                calls = [_callee(c.func) for part in _loop_body(child) for c in ast.walk(part)
                         if isinstance(c, ast.Call)]  # fmt: skip
                purifying = {c for c in calls if PURIFYING.search(c)}
                classifying = {c for c in calls if CLASSIFYING.search(c)}
                if purifying and classifying:
                    found.append(f"{where}: a loop calling {', '.join(sorted(purifying | classifying))}")
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            visit(child, f"{where}.{getattr(child, 'name')}" if named else where)

    visit(tree, module)
    return list(dict.fromkeys(found))  # a loop in a loop: once


def _second_ensembles(sources: dict[str, str]) -> list[str]:
    """Where the applications in ``sources`` (module name → source) assemble an ensemble outside
    :data:`ENSEMBLE_EXCEPTIONS`."""
    return [f for m, source in sources.items() if _layer(m) == "art_adp.apps"
            for f in _own_ensembles(source, m) if f.partition(":")[0] not in ENSEMBLE_EXCEPTIONS]  # fmt: skip


def test_the_applications_predict_through_the_one_ensemble():
    """The corruption table, the diagnostics and every other command predict a purified classifier through
    :class:`~art_adp.DefendedModel`: no function of ``art_adp.apps`` draws purifications and aggregates the
    classifier's outputs itself, or calls the pieces DefendedModel assembles."""
    assert _second_ensembles(SOURCES) == []
    for where in ENSEMBLE_EXCEPTIONS:  # each still assembles one (else it goes from the list)
        module = next(m for m in sorted(SOURCES, key=len, reverse=True) if where.startswith(m + "."))
        assert where in {f.partition(":")[0] for f in _own_ensembles(SOURCES[module], module)}, where


def test_a_planted_second_ensemble_fails():
    """The check itself: the corruption table's and the diagnostics' former ensembles, a piece imported under
    another name, and a while loop over a purifier's forward are found; a batch loop through DefendedModel, a loop
    that purifies without classifying (``reproduce.denoising_ratio``) and the library's own ensemble are not."""
    table = (
        "from ..defended import aggregate_draws\n\ndef _predictor(classifier, score, c):\n    def predict(x, gen):\n"
        "        logits = torch.stack([classifier(purify(score, x, sigma=0.1, generator=gen)) for _ in range(c.S)])\n"
        "        return aggregate_draws(logits, 'softmax').argmax(1)\n    return predict\n"
    )
    diagnostics = (
        "def ensemble_correct(classifier, transform, x, ensemble_size, seed):\n    prob = torch.zeros(())\n"
        "    for r in range(ensemble_size):\n        g = torch.Generator().manual_seed(derive_seed(seed, r))\n"
        "        prob = prob + torch.softmax(classifier(transform(x, g)).float(), dim=1)\n    return prob.argmax(1)\n"
    )
    aliased = "from ...ensemble import stack_draws as sd\n\ndef f(fn, x):\n    return sd(fn, x, 4).mean(0)\n"
    loop = ("def g(self, x):\n    p, k = 0, 0\n    while k < self.s:\n"
            "        p, k = p + self.model(self.purifier.forward(x)[0]).softmax(1), k + 1\n    return p\n")  # fmt: skip
    fine = ("def h(clf, purifier, x):\n    return [DefendedModel(clf, purifier, batch_size=len(b))(b).argmax(1) "
            "for b in x.split(8)]\n")  # fmt: skip
    denoising = ("def denoising_ratio(score, x, g):\n    after = 0.0\n    for xb in x.split(8):\n"
                 "        after += float((purify(score, xb, generator=g) - xb).pow(2).sum())\n    return after\n")  # fmt: skip
    ct, dg, check = "art_adp.apps.corruption_table", "art_adp.apps.diagnostics", "art_adp.apps.check"

    def planted(module: str, source: str) -> list[str]:
        return _second_ensembles(dict(SOURCES, **{module: SOURCES[module] + source}))

    assert planted(ct, table) == [f"{ct}._predictor.predict: a loop calling classifier, purify",
                                  f"{ct}._predictor.predict: aggregate_draws(...)"]  # fmt: skip
    assert planted(dg, diagnostics) == [f"{dg}.ensemble_correct: a loop calling classifier, torch.softmax, transform"]
    assert planted(check, aliased) == [f"{check}.f: stack_draws(...)"]
    assert planted(check, loop) == [f"{check}.g: a loop calling self.purifier.forward, softmax"]
    assert planted(check, fine) == [] and planted(check, denoising) == []
    assert _own_ensembles(SOURCES["art_adp.defended"], "art_adp.defended") != []  # the library's own: not an app's
    assert _second_ensembles({"art_adp.defended": SOURCES["art_adp.defended"]}) == []


#: The one record key (issue 70): a record's identity in a run folder -- what a resumed run skips, what ``migrate`` and
#: ``rejudge`` read back -- is :func:`art_adp.runs.records.record_key` at a command's fields (its key shape as data:
#: the cells' key fields, :func:`art_adp.runs.engine.record_identity`; the corruption table's ``RECORD_KEY``...).
RECORD_KEY = "art_adp.runs.records.record_key"
#: Names of functions that derive a key: ``key``, ``_key``, ``key_of``, ``cell_keys``, ``record_key``...
KEY_FUNCTION = re.compile(r"(^|_)keys?($|_)", re.IGNORECASE)
#: The functions that build a tuple of one mapping's fields by hand without it being a record's key, each with why.
KEY_EXCEPTIONS = {
    "art_adp.apps.levers_table.worst_over_attacks": "a lever table's cells (summaries, not records) grouped by row",
    "art_adp.apps.levers_table.table_markdown": "the markdown's rows and columns, from the table's cells",
}
SORTING = frozenset({"sorted", "sort", "min", "max"})


def _field_of(node: ast.expr) -> str | None:
    """The name whose field ``node`` reads (``r["attack"]``, ``r.get("judge", ...)``, through ``int()``, ``tuple()``
    or a 1-tuple), or None."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "str", "tuple"):
        node = node.args[0] if len(node.args) == 1 else node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "str", "tuple"):
            break
    if isinstance(node, ast.Tuple) and len(node.elts) == 1:
        return _field_of(node.elts[0])
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
        return node.value.id if isinstance(node.slice.value, str) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.args and isinstance(node.args[0], ast.Constant)):  # fmt: skip
        return node.func.value.id
    return None


def _record_keys(source: str, module: str) -> list[str]:
    """Where ``source`` derives a record's key besides :data:`RECORD_KEY`, as ``module.function: what``: a function
    named like a key (:data:`KEY_FUNCTION`), or a tuple holding two or more fields of one record -- a name bound by a
    ``for``, a comprehension, a lambda's or a function's parameters -- built by hand. Not a key: a parallel
    assignment's values (``f, b = p["forward"], p["full"]``), a sort order (a lambda given as ``key=`` to ``sorted``,
    ``min``, ``max`` or ``.sort``)."""
    tree, found = _parse(source), []
    skip: set[int] = set()  # the tuples that are neither
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and isinstance(node.targets[0], ast.Tuple):
            skip.add(id(node.value))
        elif isinstance(node, ast.Call) and _callee(node.func).rpartition(".")[2] in SORTING:
            skip |= {id(k.value.body) for k in node.keywords if k.arg == "key" and isinstance(k.value, ast.Lambda)}

    def bound(node: ast.AST) -> set[str]:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            return {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        return set()

    def visit(node: ast.AST, where: str, records: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner, names = where, records | bound(child)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{where}.{child.name}"
                if not isinstance(child, ast.ClassDef) and KEY_FUNCTION.search(child.name) and inner != RECORD_KEY:
                    found.append(f"{inner}: def {child.name}")
            if isinstance(child, ast.Tuple) and id(child) not in skip:
                fields = [f for f in map(_field_of, child.elts) if f in names]
                if any(fields.count(f) >= 2 for f in fields):
                    found.append(f"{where}: {ast.unparse(child)}")
            visit(child, inner, names)

    visit(tree, module, set())
    return found


def _second_record_keys(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (module name → source) derives a record's key outside :data:`RECORD_KEY` and
    :data:`KEY_EXCEPTIONS`, or :data:`RECORD_KEY` is gone."""
    module, _, name = RECORD_KEY.rpartition(".")
    problems = [f for m, source in sources.items() for f in _record_keys(source, m)
                if f.partition(":")[0] not in KEY_EXCEPTIONS]  # fmt: skip
    defined = [n.name for n in _parse(sources[module]).body if isinstance(n, ast.FunctionDef)]
    if name not in defined:
        problems.append(f"{module} defines no {name}")
    return problems


def test_one_function_derives_every_record_key():
    """Every command's record key -- ``evaluate``'s, ``evaluate_robustness``'s, the lever tables' and ``rejudge``'s,
    ``reproduce``'s and its diagnostics', the corruption table's, a re-judgement's -- is
    :func:`art_adp.runs.records.record_key` at the command's fields: no other function of the package is named like a
    key or builds one from a record's fields by hand, but those :data:`KEY_EXCEPTIONS` names."""
    assert _second_record_keys(SOURCES) == []
    for where in KEY_EXCEPTIONS:  # each still builds its tuple (else it goes from the list)
        module = next(m for m in sorted(SOURCES, key=len, reverse=True) if where.startswith(m + "."))
        assert where in {f.partition(":")[0] for f in _record_keys(SOURCES[module], module)}, where


def test_a_planted_second_record_key_fails():
    """The check itself: the lever tables' former ``key_of``, ``reproduce``'s former lambda and set of keys, the
    corruption table's former dictionary, a re-judgement's former set, a key function that builds its tuple from a
    list of fields and a second ``record_key`` are found; a sort order and a parallel assignment are not."""
    levers = ("def run(path, base):\n    def key_of(r: dict) -> tuple:\n        judge = r.get('judge', 'ensemble')\n"
              "        return (r.get('classifier', base), r['model'], r['setting'], r['attack'], judge, r['index'])\n"
              "    return key_of\n")  # fmt: skip
    reproduce = ("def _stage_eval(path):\n    done = {(r['budget'], r['row'], r['index']) for r in read_jsonl(path)}\n"
                 "    run_cells(path, key=lambda r: (r['budget'], r['row'], r['index']))\n")  # fmt: skip
    table = ("def _load(path):\n    return {(r.get('classifier', 'c'), r['variant'], r['corruption'], "
             "int(r['severity'])): r for r in read_jsonl(path)}\n")  # fmt: skip
    rejudged = "def rejudge(path):\n    return {(tuple(r['cell']), r['index']) for r in read_jsonl(path)}\n"
    by_list = "def _key(r, fields=('attack', 'index')):\n    return tuple(r[f] for f in fields)\n"
    second = "def record_key(record):\n    return record['setting'], record['attack'], int(record['index'])\n"
    fine = ("def f(recs, probe):\n    a, b = probe['forward'], probe['full']\n"
            "    return sorted(recs, key=lambda r: (r['steps'], r['lam']))\n")  # fmt: skip
    lv, rp, ct, en, check = ("art_adp.apps.levers", "art_adp.apps.reproduce", "art_adp.apps.corruption_table",
                             "art_adp.runs.engine", "art_adp.apps.check")  # fmt: skip

    def planted(module: str, source: str) -> list[str]:
        return _second_record_keys(dict(SOURCES, **{module: SOURCES[module] + source}))

    key_of = "(r.get('classifier', base), r['model'], r['setting'], r['attack'], judge, r['index'])"
    assert planted(lv, levers) == [f"{lv}.run.key_of: def key_of", f"{lv}.run.key_of: {key_of}"]
    assert planted(rp, reproduce) == [f"{rp}._stage_eval: (r['budget'], r['row'], r['index'])"] * 2
    assert planted(ct, table) == [
        f"{ct}._load: (r.get('classifier', 'c'), r['variant'], r['corruption'], int(r['severity']))"]
    assert planted(en, rejudged) == [f"{en}.rejudge: (tuple(r['cell']), r['index'])"]
    assert planted(check, by_list) == [f"{check}._key: def _key"]
    assert planted(check, second) == [f"{check}.record_key: def record_key",
                                      f"{check}.record_key: (record['setting'], record['attack'], int(record['index']))"]
    assert planted(check, fine) == []
    gone = SOURCES["art_adp.runs.records"].replace("def record_key(", "def identity_of(")
    assert _second_record_keys(dict(SOURCES, **{"art_adp.runs.records": gone})) == [
        "art_adp.runs.records defines no record_key"]


#: The one writer of a run's settings file and the one refusal of a run asked with other settings (issue 70): every
#: command's guard -- ``evaluate``'s, the lever tables', ``evaluate_robustness``'s (keyed by cell, through
#: ``engine.guard``), the certificates', the corruption table's, the reproduction's (one set) -- is
#: :func:`art_adp.runs.records.guard_settings`. One file name (``settings.json``), the earlier layouts' too (which
#: ``art-adp migrate`` moves), spelled as a constant, as the layout's name ``SETTINGS`` or asked of ``settings_path``.
SETTINGS_GUARD = "art_adp.runs.records.guard_settings"
SETTINGS_FILES = frozenset({"settings.json", "cells.json", "recipe.json", "certify_settings.json"})
SETTINGS_NAMES = frozenset({"SETTINGS"})
SETTINGS_CALLS = frozenset({"settings_path", "held_settings"})
#: A refusal's words: a ``raise`` whose message says them is a settings guard.
REFUSAL = re.compile(r"(other|different) settings", re.IGNORECASE)
#: Callees that write the path among their arguments (or the path they are called on): by their name's last part.
WRITING = frozenset({"write_json", "write_text", "write_bytes", "dump", "replace", "rename", "_replace", "copy",
                     "copyfile", "copy2", "move", "touch", "append_records", "save_file"})  # fmt: skip
#: The other functions that write a settings file or refuse other settings, each with why.
SETTINGS_EXCEPTIONS = {
    "art_adp.runs.migrate.migrate": "converts an old evaluation folder's settings.json to the guard's keyed shape, "
    "once, the old file kept beside as settings.json.v0",
    "art_adp.runs.records.load_records": "two record files that disagree on a key: records in conflict, no settings "
    "file read",
    "art_adp.apps.train_denoiser.train_denoiser": "its settings ride on curve.jsonl's first record, not in a settings "
    "file; its message ('holds a run with other settings') is the resume tests' (a later step gives it a file)",
    "art_adp.models.adversarial._restore_state": "a training checkpoint's settings, in the library (which imports no "
    "runs): a file of weights, not a run folder's settings",
    "art_adp.models.fast_adversarial._resume": "likewise: an epoch checkpoint's settings, in the library",
}


def _settings_code(source: str, module: str) -> list[str]:
    """Where ``source`` writes a settings file or refuses other settings, as ``module.function: what``: a call of a
    :data:`WRITING` callee (or ``open`` in a writing mode) whose path names one of :data:`SETTINGS_FILES` -- as a
    constant, or through a name the function bound to one (``stored = run_dir / "recipe.json"``) -- and a ``raise``
    whose message says :data:`REFUSAL`."""
    tree, found = _parse(source), []

    def names_file(node: ast.AST, paths: set[str]) -> bool:
        return any((isinstance(n, ast.Constant) and n.value in SETTINGS_FILES)
                   or (isinstance(n, ast.Name) and (n.id in paths or n.id in SETTINGS_NAMES))
                   or (isinstance(n, ast.Call) and _callee(n.func).rpartition(".")[2] in SETTINGS_CALLS)
                   for n in ast.walk(node))  # fmt: skip

    def writes(call: ast.Call, paths: set[str]) -> bool:
        name = _callee(call.func).rpartition(".")[2]
        mode = [a.value for a in [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "mode")]
                if isinstance(a, ast.Constant) and isinstance(a.value, str)]  # fmt: skip
        if not (name in WRITING or (name == "open" and any(set(m) & set("wax+") for m in mode))):
            return False
        target = [call.func.value] if isinstance(call.func, ast.Attribute) else []
        return any(names_file(a, paths) for a in [*target, *call.args, *(k.value for k in call.keywords)])

    def visit(node: ast.AST, where: str, paths: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner, bound = where, paths
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{where}.{child.name}"
                bound = paths | {t.id for a in ast.walk(child) if isinstance(a, ast.Assign) and names_file(a.value, set())
                                 for t in a.targets if isinstance(t, ast.Name)}  # fmt: skip
            if isinstance(child, ast.Call) and writes(child, paths):
                found.append(f"{where}: writes {ast.unparse(child)[:60]}")
            if isinstance(child, ast.Raise) and child.exc is not None and REFUSAL.search(
                    " ".join(c.value for c in ast.walk(child.exc) if isinstance(c, ast.Constant)
                             and isinstance(c.value, str))):  # fmt: skip
                found.append(f"{where}: refuses other settings")
            visit(child, inner, bound)

    module_paths = {t.id for a in tree.body if isinstance(a, ast.Assign) and names_file(a.value, set())
                    for t in a.targets if isinstance(t, ast.Name)}  # fmt: skip
    visit(tree, module, module_paths)
    return found


def _second_settings_guards(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (module name → source) writes a settings file or refuses other settings outside
    :data:`SETTINGS_GUARD` and :data:`SETTINGS_EXCEPTIONS`, or the one guard neither writes nor refuses."""
    module, _, name = SETTINGS_GUARD.rpartition(".")
    problems = [f for m, source in sources.items() for f in _settings_code(source, m)
                if f.partition(":")[0] not in (SETTINGS_GUARD, *SETTINGS_EXCEPTIONS)]  # fmt: skip
    one = next((n for n in _parse(sources[module]).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    calls = {_callee(c.func) for c in ast.walk(one) if isinstance(c, ast.Call)} if one else set()
    refuses = f"{SETTINGS_GUARD}: refuses other settings" in _settings_code(sources[module], module)
    if "write_json" not in calls or not refuses:
        problems.append(f"{SETTINGS_GUARD} does not write a settings file and refuse other settings")
    return problems


def test_one_function_writes_a_runs_settings_and_refuses_other_settings():
    """Every command's settings file -- ``evaluate``'s and ``evaluate_robustness``'s ``settings.json``, the lever
    tables' ``cells.json``, the certificates' ``certify_settings.json``, the corruption table's ``settings.json``,
    the reproduction's ``recipe.json`` -- is written by :func:`art_adp.runs.records.guard_settings`, which alone
    refuses a run asked with other settings: no other function of the package writes one or says "other settings" in
    a ``raise``, but those :data:`SETTINGS_EXCEPTIONS` names."""
    assert _second_settings_guards(SOURCES) == []
    for where in SETTINGS_EXCEPTIONS:  # each still writes or refuses (else it goes from the list)
        module = next(m for m in sorted(SOURCES, key=len, reverse=True) if where.startswith(m + "."))
        assert where in {f.partition(":")[0] for f in _settings_code(SOURCES[module], module)}, where


def test_a_planted_second_settings_writer_or_refusal_fails():
    """The check itself: an ad hoc refusal (the denoiser trainer's), a settings file written by constant, through a
    name bound to its path and by ``open(..., "w")``, and the one guard gone are found; reading a settings file and
    writing another JSON file are not."""
    refusal = ("def _check(run_dir, stored, settings):\n    if stored != settings:\n        raise ValueError(f'{run_dir}"
               " holds a run with other settings ({stored}); use another run_dir.')\n")  # fmt: skip
    constant = "def _save(run_dir, s):\n    write_json(run_dir / 'certify_settings.json', s, indent=2)\n"
    named = "def _keep(run_dir, recipe):\n    stored = run_dir / 'recipe.json'\n    stored.write_text(json.dumps(recipe))\n"
    opened = ("def _cells(d, c):\n    with open(os.path.join(d, 'cells.json'), 'w') as f:\n"
              "        json.dump(c, f)\n")  # fmt: skip
    fine = ("def f(run_dir, t):\n    held = json.loads((run_dir / 'settings.json').read_text())\n"
            "    write_json(run_dir / 'table.json', t)\n    return folder_scheme(run_dir / 'cells.json'), held\n")  # fmt: skip
    lv, ct, rp, check = "art_adp.apps.levers", "art_adp.apps.certify_run", "art_adp.apps.reproduce", "art_adp.apps.check"

    def planted(module: str, source: str) -> list[str]:
        return _second_settings_guards(dict(SOURCES, **{module: SOURCES[module] + source}))

    assert planted(lv, refusal) == [f"{lv}._check: refuses other settings"]
    assert planted(ct, constant) == [f"{ct}._save: writes write_json(run_dir / 'certify_settings.json', s, indent=2)"]
    assert planted(rp, named) == [f"{rp}._keep: writes stored.write_text(json.dumps(recipe))"]
    assert planted(check, opened) == [f"{check}._cells: writes open(os.path.join(d, 'cells.json'), 'w')"]
    assert planted(check, fine) == []
    records = "art_adp.runs.records"
    gone = SOURCES[records].replace("def guard_settings(", "def keep_settings(")
    assert _second_settings_guards(dict(SOURCES, **{records: gone})) == [
        f"{records}.keep_settings: refuses other settings",
        f"{SETTINGS_GUARD} does not write a settings file and refuse other settings"]


#: The one Clf-PGD (issue 70): ART's ``ProjectedGradientDescent`` on the bare classifier,
#: :class:`art_adp.attacks.ClassifierPGD`, the registry's ``clf-pgd`` in every plan (evaluate's and reproduce's rows,
#: the lever tables' bare and transferred ones). The other modules that build ART's PGD, each with why: none of them
#: is a Clf-PGD.
CLF_PGD_MODULE = "art_adp.attacks.classifier_pgd"
ART_PGD_USERS = {
    "art_adp.apps.robust_baseline": "ART's PGD through a purifier as ART attacks a defended estimator: the validation "
    "of a training behind the purifier (without one it takes the registry's Clf-PGD)",
    "art_adp.models.adversarial": "adversarial training's inner attack",
    "art_adp.apps.demo": "the demo's plain ART PGD on plain ART estimators is its point",
    "art_adp.apps.detect_demo": "the detection demo's plain ART PGD, as the demo's",
}


def _art_pgd_users(sources: dict[str, str]) -> list[str]:
    """The modules of ``sources`` that name ART's ``ProjectedGradientDescent`` (an import, a call or a base class)
    beyond :data:`CLF_PGD_MODULE` and :data:`ART_PGD_USERS`."""
    named = {m for m, source in sources.items() for node in ast.walk(_parse(source))
             if isinstance(node, ast.ImportFrom) and any(a.name == "ProjectedGradientDescent" for a in node.names)}  # fmt: skip
    return sorted(named - {CLF_PGD_MODULE, *ART_PGD_USERS})


def _bare_attacks() -> list[str]:
    """The registry's attacks that, built on a defended estimator, attack its bare classifier (their estimator has no
    defences left)."""
    import torch
    from art.estimators.classification import PyTorchClassifier

    from art_adp import ADPPurifier, NCSNv2
    from art_adp.attacks.registry import REGISTRY, Budget
    from art_adp.ensemble import defences

    torch.manual_seed(0)
    purifier = ADPPurifier(NCSNv2(1, 8, ngf=4).eval(), sigma=0.1, steps=0, device_type="cpu")
    est = PyTorchClassifier(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)),
                            torch.nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10, clip_values=(0.0, 1.0),
                            preprocessing_defences=[purifier])  # fmt: skip
    b = Budget(eps=0.1, eps_step=0.02, max_iter=1)
    built = {name: spec.build(est, b, 0) for name, spec in REGISTRY.items()}
    return sorted(n for n, a in built.items() if not defences(getattr(a, "estimator", est)))


def test_one_clf_pgd():
    """Clf-PGD is one attack: the registry's only entry that attacks the bare classifier behind a defended estimator is
    ``clf-pgd``, and no module builds ART's PGD beyond it and the listed ones (each still does, else it goes)."""
    from art_adp.attacks.registry import BLIND_ATTACK

    assert _bare_attacks() == [BLIND_ATTACK]
    assert _art_pgd_users(SOURCES) == []
    assert all("ProjectedGradientDescent" in SOURCES[m] for m in ART_PGD_USERS)


def test_a_planted_second_clf_pgd_fails():
    """The check itself: the lever tables' former ART PGD beside the one (a module of its own) is found."""
    seeded = ("from art.attacks.evasion import ProjectedGradientDescent\n\n\nclass SeededPGD(ProjectedGradientDescent):"
              "\n    name = 'art-pgd'\n")  # fmt: skip
    assert _art_pgd_users(dict(SOURCES, **{"art_adp.attacks.art_pgd": seeded})) == ["art_adp.attacks.art_pgd"]


#: The one folder layout (issue 70): every command's records in ``records/rank-<r>.jsonl`` and its settings in
#: ``settings.json``, named by :mod:`art_adp.runs.records` alone (``records_path``, ``settings_path``,
#: ``read_records``); the earlier layouts' file names, which ``art-adp migrate`` moves, only there too.
LAYOUT_MODULE = "art_adp.runs.records"
LAYOUT_NAMES = frozenset({"records.jsonl", "settings.json", "cells.json", "recipe.json", "certify_settings.json"})


def _layout_names(sources: dict[str, str]) -> list[str]:
    """Where a module other than :data:`LAYOUT_MODULE` spells a file of a run folder's layout (:data:`LAYOUT_NAMES`)
    as a string of its own, ``module:line``."""
    found = []
    for module, source in sources.items():
        if module == LAYOUT_MODULE:
            continue
        for node in ast.walk(_parse(source)):
            if isinstance(node, ast.Constant) and node.value in LAYOUT_NAMES:
                found.append(f"{module}:{node.lineno}")
    return found


def test_one_folder_layout():
    """No module but :data:`LAYOUT_MODULE` names the records or the settings file of a run folder: each writer asks
    ``records_path`` and ``settings_path`` (which refuse an earlier layout, naming ``art-adp migrate``)."""
    assert _layout_names(SOURCES) == []


def test_a_planted_second_layout_fails():
    """The check itself: a lever table writing its records to the former name is found."""
    levers = "art_adp.apps.levers"
    planted = SOURCES[levers] + '\n\ndef _path(run_dir):\n    return run_dir / "records.jsonl"\n'
    lines = len(SOURCES[levers].splitlines())
    assert _layout_names(dict(SOURCES, **{levers: planted})) == [f"{levers}:{lines + 4}"]


#: The one path from a plan's cells to its run folder (issue 70): :func:`art_adp.runs.engine.run` guards the cells'
#: settings and runs the blocks not yet recorded into the one layout; every command (evaluate, levers, reproduce,
#: ``evaluate_robustness``) calls it, and it alone calls the block loop.
RUN_PATH = "art_adp.runs.engine.run"


def _block_loop_callers(sources: dict[str, str]) -> list[str]:
    """The functions of ``sources`` that call the engine's block loop (``run_cells``), as ``module.function``."""
    found = []
    for module, source in sources.items():
        for node in ast.walk(_parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(isinstance(c, ast.Call) and _callee(c.func).rpartition(".")[2] == "run_cells"
                       for c in ast.walk(node)):  # fmt: skip
                    found.append(f"{module}.{node.name}")
    return found


def test_one_run_path():
    """Every command measures through :data:`RUN_PATH`: it alone calls the block loop."""
    assert _block_loop_callers(SOURCES) == [RUN_PATH]


def test_a_planted_second_run_path_fails():
    """The check itself: a lever table running its cells itself, as it did, is found."""
    levers = "art_adp.apps.levers"
    planted = SOURCES[levers] + "\n\ndef _measure(cells, build, x, y, path):\n    run_cells(cells, build, x, y, path)\n"
    assert _block_loop_callers(dict(SOURCES, **{levers: planted})) == [f"{levers}._measure", RUN_PATH]
