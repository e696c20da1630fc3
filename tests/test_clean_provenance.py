"""No committed result names a call that started from uncommitted code: every ``code_version`` a result file records
for the start of a call is a clean commit (a clean start whose checkout moved on, ``code_version_at_end``, is fine).

The calls below started dirty before this rule and are waiting to be measured again from a clean commit; the list
only shrinks: an entry whose call is gone (re-measured) must leave it, and a new dirty call anywhere fails."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

#: (result file, where in it, the dirty code version): each to be re-measured from a clean commit.
PENDING = {
    ("denoiser_fashion_mnist.json", "provenance", "0c6a9cf-dirty"),
}


def dirty_starts(value, where: str = "") -> list[tuple[str, str]]:
    """Every ``code_version`` in a result that names uncommitted code (``…-dirty)``): where it is and the version;
    ``code_version_at_end`` (where a clean start's checkout had moved to) is not a start."""
    if isinstance(value, dict):
        found = []
        version = value.get("code_version")
        if isinstance(version, str) and version.endswith("-dirty)"):
            found.append((where or "(top)", version.rpartition("(")[2].rstrip(")")))
        for key, inner in value.items():
            found += dirty_starts(inner, f"{where}.{key}" if where else key)
        return found
    if isinstance(value, list):
        return [hit for i, inner in enumerate(value) for hit in dirty_starts(inner, f"{where}[{i}]")]
    return []


def test_dirty_starts_are_found_at_any_depth_and_a_dirty_end_is_not_one():
    result = {"provenance": {"code_version": "art-adp 0.2 (abc1234)", "code_version_at_end": "art-adp 0.2 (def-dirty)",
                             "calls": [{"code_version": "art-adp 0.2 (1111111-dirty)"}]},
              "runs": {"fp32": {"code_version": "art-adp 0.2 (2222222-dirty)"}}}  # fmt: skip
    assert dirty_starts(result) == [("provenance.calls[0]", "1111111-dirty"), ("runs.fp32", "2222222-dirty")]


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_no_result_names_a_call_started_on_uncommitted_code(path):
    found = {(path.name, where, version) for where, version in dirty_starts(json.loads(path.read_text()))}
    assert found - PENDING == set(), "measure it again from a clean commit"


def test_the_pending_list_only_holds_calls_still_there():
    held = {(p.name, where, version) for p in RESULTS.glob("*.json")
            for where, version in dirty_starts(json.loads(p.read_text()))}  # fmt: skip
    assert PENDING - held == set(), "re-measured: take it off PENDING"
