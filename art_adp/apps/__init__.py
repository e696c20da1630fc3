"""The applications: everything that writes a run directory, built on the library's public API and on the shared
run-folder plumbing of :mod:`art_adp.runs`. The three commands that measure accuracy under attack --
``evaluate``, ``levers``, ``reproduce`` -- are plans of the one evaluation engine, :mod:`art_adp.runs.engine`.

- :mod:`~art_adp.apps.cli`: ``art-adp`` / ``python -m art_adp`` (parsing only, one call per command);
- :mod:`~art_adp.apps.commands`: what the commands share; each command lives next to its application and takes
  its settings dataclass, which the CLI builds from the flags (docs/architecture.md);
- :mod:`~art_adp.apps.evaluation`: the evaluation harness (``evaluate``, ``EvalConfig``) and its card;
- :mod:`~art_adp.apps.levers`: the lever tables of MNIST, Fashion-MNIST and CIFAR-10 (their presets as data in
  :mod:`~art_adp.apps.levers_presets`, their classifiers in :mod:`~art_adp.apps.levers_classifiers`, the table from
  the records in :mod:`~art_adp.apps.levers_table`);
- :mod:`~art_adp.apps.reproduce` with :mod:`~art_adp.apps.snapshots`: the paper's MNIST row end to end (its recipe
  in :mod:`~art_adp.apps.reproduce_recipe`, its report in :mod:`~art_adp.apps.reproduce_report`);
- :mod:`~art_adp.apps.corruption_table`: the common-corruption table; :mod:`~art_adp.apps.certify_run`: the
  certification run; :mod:`~art_adp.apps.detect_demo` and :mod:`~art_adp.apps.demo`: the digits demos;
  :mod:`~art_adp.apps.plots`: their figures.

Nothing in the library proper imports this package.
"""
