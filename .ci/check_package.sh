#!/usr/bin/env bash
# Release check: build the wheel and sdist, `twine check` them, check what they carry (the licence in both, no tests
# in the sdist), install the wheel (not editable) into a fresh venv, and run `import art_adp` and a quick
# `art-adp demo` from it, outside the source tree, after loading the bundled digits models by name.
# Needs the release extra in the calling environment (pip install -e ".[release]").
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m build --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
python -m twine check --strict "$work"/dist/*
python - "$work"/dist/*.whl "$work"/dist/*.tar.gz <<'PY'
import sys, tarfile, zipfile

wheel, sdist = sys.argv[1:]
licence = open("LICENSE", encoding="utf-8").read()
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    found = [n for n in names if ".dist-info/" in n and n.rsplit("/", 1)[-1] == "LICENSE"]
    assert found, f"no LICENSE in the wheel's .dist-info: {names}"
    assert z.read(found[0]).decode() == licence, f"{found[0]} differs from LICENSE"
    metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-File: LICENSE" in metadata, "the wheel's METADATA names no License-File"
    shipped = {"art_adp/pretrained/bundled.json", "art_adp/pretrained/digits_score.safetensors",
               "art_adp/pretrained/digits_classifier.safetensors"}
    assert shipped <= set(names), f"the wheel lacks the bundled models: {sorted(shipped - set(names))}"
with tarfile.open(sdist) as t:
    names = t.getnames()
    top = names[0].split("/")[0]
    assert f"{top}/LICENSE" in names, f"no LICENSE at the top of the sdist: {sorted(names)[:20]}"
    assert t.extractfile(f"{top}/LICENSE").read().decode() == licence, "the sdist's LICENSE differs from LICENSE"
    tests = [n for n in names if n.startswith(f"{top}/tests/")]
    assert not tests, f"the sdist ships tests that need a clone to run: {tests[:5]}"
print(f"licence in {wheel.rsplit('/', 1)[-1]} ({found[0]}) and {sdist.rsplit('/', 1)[-1]}; no tests in the sdist")
PY
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q torch==2.13.0 "$work"/dist/*.whl
cd "$work"
"$work/venv/bin/python" -c "import art_adp; assert not art_adp.__file__.startswith('$repo'); \
print('import art_adp', art_adp.__version__, 'from', art_adp.__file__)"
"$work/venv/bin/python" -c "from art_adp import load_score_model; from art_adp.models import load_classifier; \
load_score_model('digits'); load_classifier('digits'); print('the bundled digits models load by name')"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$work/venv/bin/art-adp" demo --run-dir "$work/demo" --score-iterations 20 \
  --ngf 8 --n-examples 20 --max-iter 2 --ensemble-size 2 --quiet
test -s "$work/demo/digits.png" && test -s "$work/demo/results.json"
echo "package check passed"
