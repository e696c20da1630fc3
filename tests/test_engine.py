"""The evaluation engine (art_adp.runs.engine): blocks, seeds, judgements, the per-image worst case, resume after a
kill mid-block, the settings guard, and the Python entry point against hand-made records."""

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch

from art_adp import ADPPurifier, KernelScore
from art_adp.attacks.registry import AUTOATTACK, BLIND_ATTACK, FULL_ATTACK, Budget
from art_adp.runs import engine
from art_adp.runs.engine import (
    Cell,
    Judgement,
    Seeds,
    blocks,
    clean,
    correct,
    defended_estimator,
    evaluate_robustness,
    judge,
    record_identity,
    run_cells,
    worst_case,
)
from art_adp.runs.records import read_jsonl, read_records
from art_adp.runs.seeds import SeedPlan, check_scheme, derive_seed


@pytest.fixture(scope="module")
def digits():
    """A linear classifier on the first 300 digits' complement, and a one-step exact-score purifier."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.images / 16).astype(np.float32)[:, None], d.target.astype(np.int64)
    torch.manual_seed(0)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(clf.parameters(), 1e-2)
    xt, yt = torch.as_tensor(x[300:]), torch.as_tensor(y[300:])
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(clf(xt), yt).backward()
        opt.step()
    return clf.eval(), x[:300], y[:300], torch.as_tensor(x[300:700])


def purifier(train):
    return ADPPurifier(KernelScore(train, bandwidth=0.25), sigma=0.25, steps=1, step_size=0.25, tau=0.0)


KW = dict(eps=0.1, max_iter=3, eot_samples=2, ensemble_size=2, repeats=3, block_size=4, progress=False)


def test_blocks_cut_by_index_and_one_block_without_a_size():
    cell = Cell(("a",), ("k",), "t", clean, Judgement(), SeedPlan("apart", 0), block_size=3)
    assert blocks(cell, [0, 1, 2, 3, 7, 8]) == [(0, [0, 1, 2]), (1, [3]), (2, [7, 8])]
    one = Cell(("a",), ("k",), "t", clean, Judgement(), SeedPlan("apart", 0), block_size=None)
    assert blocks(one, [4, 9]) == [(0, [4, 9])] and blocks(one, []) == []


def test_the_shared_scheme_is_the_evaluation_harness_scheme():
    s = SeedPlan("shared", 5, ("main", "bpda-eot"), 2)(3, 16)  # the block's number does not enter
    assert s.attack == s.noise == derive_seed(5, "main", "bpda-eot", 16)
    assert s.judge == (
        derive_seed(5, "judge", "main", "bpda-eot", 16, 0),
        derive_seed(5, "judge", "main", "bpda-eot", 16, 1),
    )


def test_the_apart_scheme_derives_the_attack_and_noise_seeds_apart_and_keeps_the_judgements():
    shared, apart = SeedPlan("shared", 5, ("a",), 2)(0, 16), SeedPlan("apart", 5, ("a",), 2)(0, 16)
    assert apart.attack == derive_seed(5, "attack", "a", 16) and apart.noise == derive_seed(5, "noise", "a", 16)
    assert len({apart.attack, apart.noise, shared.attack}) == 3 and apart.judge == shared.judge
    with pytest.raises(ValueError, match=r"Unknown seed scheme 'nope'; choose from \['apart', 'shared', 'levers', "):
        SeedPlan("nope", 5)
    with pytest.raises(ValueError, match=r"Unknown seed scheme 'levers'; choose from \['apart', 'shared'\]\.$"):
        check_scheme("levers")  # an evaluation folder names one of the two


def test_the_plans_seeds_are_data_and_their_schemes_the_derivations_they_replaced():
    plan = SeedPlan("levers", 7, ("bpda-eot",), 2)
    assert json.loads(json.dumps(asdict(plan))) == {
        "scheme": "levers",
        "seed": 7,
        "identity": ["bpda-eot"],
        "repeats": 2,
    }
    assert plan(0, 0) == Seeds(derive_seed(7, "bpda-eot"), derive_seed(7, "attack", "bpda-eot"),
                               (derive_seed(7, "judge", 0), derive_seed(7, "judge", 1)))  # fmt: skip
    part = derive_seed(7, "block", 2)  # a later block: from its number
    assert plan(2, 77) == Seeds(derive_seed(part, "bpda-eot"), derive_seed(part, "attack", "bpda-eot"),
                                (derive_seed(part, "judge", 0), derive_seed(part, "judge", 1)))  # fmt: skip
    assert SeedPlan("levers-fixed", 7, ("r",))(3, 0) == Seeds(derive_seed(7, "r"), derive_seed(7, "fixed", 150))
    assert SeedPlan("levers-white", 7, (AUTOATTACK,))(0, 0) == Seeds(derive_seed(7, AUTOATTACK), 7)
    assert SeedPlan("levers-white", 7, ("pgd", "pgd40"))(0, 0) == Seeds(derive_seed(7, "pgd", "pgd40"), 7)
    assert SeedPlan("levers-once", 7)(4, 9) == Seeds(7, 7, (derive_seed(7, "judge", 0),))
    s = derive_seed(3, 400, "clean", 10)
    assert SeedPlan("reproduce", 3, (400, "clean"), 1)(0, 10) == Seeds(s, derive_seed(s, "attack", "clean"),
                                                                       (derive_seed(s, "judge", 0),))  # fmt: skip


def test_a_new_folder_records_its_seed_scheme_and_an_old_one_resumes_with_its_own(digits, tmp_path):
    """A folder measured before the scheme was recorded (its settings name none) resumes under the shared scheme: the
    same records as one run of every image under it; a new folder takes the apart scheme, other draws."""
    clf, x, y, train = digits
    kw = {**KW, "repeats": 1, "max_iter": 2, "attacks": (BLIND_ATTACK,)}
    old, whole, new = tmp_path / "old", tmp_path / "whole", tmp_path / "new"
    evaluate_robustness(clf, purifier(train), x[:8], y[:8], run_dir=whole, seed_scheme="shared", **kw)
    (old / "records").mkdir(parents=True)
    for name in ("settings.json", "records/rank-0.jsonl"):  # the old folder: killed after the first block of 4
        (old / name).write_text((whole / name).read_text())
    lines = (old / "records" / "rank-0.jsonl").read_text().splitlines(keepends=True)
    (old / "records" / "rank-0.jsonl").write_text("".join(l for l in lines if json.loads(l)["index"] < 4))
    assert all("seed_scheme" not in v for v in json.loads((old / "settings.json").read_text()).values())
    evaluate_robustness(clf, purifier(train), x[:8], y[:8], run_dir=old, **kw)  # resumed: the second block
    evaluate_robustness(clf, purifier(train), x[:8], y[:8], run_dir=new, **kw)
    assert engine.folder_scheme(old / "settings.json") == "shared"
    assert engine.folder_scheme(new / "settings.json") == "apart"
    (tmp_path / "own.json").write_text(json.dumps({"preset": "smoke", "eps": 0.1}))  # a caller's keys, no cell's
    assert engine.folder_scheme(tmp_path / "own.json") == "apart"

    def examples(folder):
        return np.concatenate([np.load(p)["images"] for p in engine.kept(folder, (BLIND_ATTACK,))])

    key = lambda r: (r["attack"], r["index"])  # noqa: E731
    assert sorted(read_records(old), key=key) == sorted(read_records(whole), key=key)
    assert np.array_equal(examples(old)[-4:], examples(whole)[-4:])  # the second block's, made again alike
    assert not np.array_equal(examples(new), examples(whole))
    with pytest.raises(ValueError, match="made with other settings: seed_scheme"):
        evaluate_robustness(clf, purifier(train), x[:8], y[:8], run_dir=new, seed_scheme="shared", **kw)


def test_worst_case_by_hand():
    shared, robust = worst_case({"a": {0: True, 1: True, 2: False}, "b": {0: True, 1: False, 3: True}})
    assert shared == [0, 1] and robust.tolist() == [True, False]
    assert worst_case({"a": {0: True}}) is None and worst_case({"a": {0: True}, "b": {1: True}}) is None


def test_judge_kinds(digits):
    clf, x, y, train = digits
    est = defended_estimator(clf, purifier(train), input_shape=(1, 8, 8))
    xs = x[:6]
    ens = judge(est, xs, Judgement("ensemble", 2, 3, batch_size=4), (1, 2, 1))
    assert ens.shape == (3, 6) and (ens[0] == ens[2]).all()  # the same seed, the same draws
    assert (ens[0] == judge(est, xs, Judgement("ensemble", 2, 1, batch_size=6), (1,))[0]).all()  # batch-independent
    with pytest.raises(ValueError, match="R = 3 needs 3 seeds"):
        judge(est, xs, Judgement("ensemble", 2, 3), (1,))
    bare = defended_estimator(clf, None, input_shape=(1, 8, 8))
    once = judge(bare, xs, Judgement("once", batch_size=2))
    assert once.tolist() == [clf(torch.as_tensor(xs)).argmax(1).tolist()]
    assert judge(est, xs, Judgement("none")).shape == (0, 6)
    with engine.frozen_noise(est, 3):
        fixed = [judge(est, xs, Judgement("fixed", batch_size=6)) for _ in range(2)]
    assert (fixed[0] == fixed[1]).all()
    with pytest.raises(ValueError, match="judgement must be one of"):
        Judgement("vote")


def test_run_cells_resumes_and_shards_into_the_one_record_layout(digits, tmp_path, capsys):
    """Blocks go in order; a rank runs every world-th block; what is on file is skipped; every line is the engine's
    layout, the cell's fields first."""
    clf, x, y, _ = digits
    est = defended_estimator(clf, None, input_shape=(1, 8, 8))
    cell = Cell(("a",), ("k",), "bare", clean, Judgement("once"), lambda b, f: Seeds(0, 0), {"k": "a"}, block_size=2,
                images=7, label="bare | clean")  # fmt: skip
    path = tmp_path / "r1.jsonl"
    run_cells([cell], lambda _: est, x, y, path, shard=(1, 2), progress=False)
    assert [r["index"] for r in read_jsonl(path)] == [2, 3, 6]
    run_cells([cell], lambda _: est, x, y, path, progress=False)
    recs = read_jsonl(path)
    assert [r["index"] for r in recs] == [2, 3, 6, 0, 1, 4, 5]  # the rest, in order
    assert {frozenset(r) for r in recs} == {frozenset(("k", "index", "label", "pred", "undefended_pred", "linf", "l2"))}
    recs.sort(key=lambda r: r["index"])
    bare = clf(torch.as_tensor(x[:7])).argmax(1).tolist()
    assert [r["pred"] for r in recs] == [[p] for p in bare] and [r["undefended_pred"] for r in recs] == bare
    assert [r["label"] for r in recs] == y[:7].tolist() and {(r["linf"], r["l2"]) for r in recs} == {(0.0, 0.0)}
    assert [correct(r) for r in recs] == [p == t for p, t in zip(bare, y[:7])]
    with pytest.raises(ValueError, match=r"^extras must be None or one of \['flags', 'wall_s'\], got 'norms'\.$"):
        Cell(("a",), ("k",), "bare", clean, Judgement("once"), SeedPlan("apart", 0), extras="norms")
    shown = [line.rsplit(" | ", 1) for line in capsys.readouterr().out.splitlines()]
    assert [s for s, _ in shown] == ["bare | clean"] * 4 and shown[0][1].endswith("of 2")


def test_the_record_key_is_derived_from_the_cells(digits, tmp_path):
    """A field a cell leaves out of its records (a lever table's own classifier) keys them at the cell's value, so a
    resumed run skips them and a cell at another value does not; a field no cell leaves out keys a record lacking it
    apart from every cell."""
    clf, x, y, _ = digits
    est = defended_estimator(clf, None, input_shape=(1, 8, 8))
    seeds = lambda b, f: Seeds(0, 0)  # noqa: E731
    own = Cell(("own", "clean"), ("classifier", "k"), "bare", clean, Judgement("once"), seeds, {"k": "clean"}, images=4)
    key = record_identity([own])
    assert key({"k": "clean", "index": 3}) == ("own", "clean", 3)
    assert key({"classifier": "x", "k": "clean", "index": 3}) == ("x", "clean", 3)
    path = tmp_path / "r.jsonl"
    run_cells([own], lambda _: est, x, y, path, progress=False)
    assert [sorted(r) for r in read_jsonl(path)][0][:3] == ["index", "k", "l2"]  # no classifier written
    other = Cell(("other", "clean"), ("classifier", "k"), "bare", clean, Judgement("once"), seeds,
                 {"classifier": "other", "k": "clean"}, images=4)  # fmt: skip
    run_cells([own, other], lambda _: est, x, y, path, progress=False)
    assert [r.get("classifier", "own") for r in read_jsonl(path)] == ["own"] * 4 + ["other"] * 4
    folder = tmp_path / "run"
    engine.run([own], lambda _: est, x, y, folder, progress=False)
    assert engine.pending([own, other], 3, folder) == {("own", "clean"): 0, ("other", "clean"): 3}
    written = record_identity([other])
    assert written({"k": "clean", "index": 0}) not in {("own", "clean", 0), ("other", "clean", 0)}


def test_cells_whose_records_could_not_be_told_apart_are_refused():
    seeds = SeedPlan("apart", 0)
    a = Cell(("a", "clean"), ("classifier", "k"), "t", clean, Judgement(), seeds, {"k": "clean"})
    b = Cell(("b", "clean"), ("classifier", "k"), "t", clean, Judgement(), seeds, {"k": "clean"})
    with pytest.raises(ValueError, match=r"leave the key field\(s\) \{'classifier': \['a', 'b'\]\} out of their"):
        record_identity([a, b])
    c = Cell(("clean",), ("k",), "t", clean, Judgement(), seeds, {"k": "clean"})
    with pytest.raises(ValueError, match=r"name one set of key fields, these name \[\('classifier', 'k'\), \('k',\)\]"):
        record_identity([a, c])
    with pytest.raises(ValueError, match=r"\('a', 'clean'\) has 2 values, key_fields \('k',\) 1 names"):
        Cell(("a", "clean"), ("k",), "t", clean, Judgement(), seeds)
    with pytest.raises(ValueError, match=r"into its records' key fields than its key: k 'pgd' \(key 'clean'\)\.$"):
        Cell(("clean",), ("k",), "t", clean, Judgement(), seeds, {"k": "pgd"})


def test_evaluate_robustness_by_hand_from_its_records(digits, tmp_path):
    clf, x, y, train = digits
    res = evaluate_robustness(clf, purifier(train), x[:10], y[:10], attacks=(BLIND_ATTACK, FULL_ATTACK),
                              run_dir=tmp_path, **KW)  # fmt: skip
    recs = [json.loads(line) for line in (tmp_path / "records" / "rank-0.jsonl").read_text().splitlines()]
    assert len(recs) == 30 and {len(r["pred"]) for r in recs} == {3}
    ok = {(r["attack"], r["index"]): all(p == r["label"] for p in r["pred"]) for r in recs}
    for a in (BLIND_ATTACK, FULL_ATTACK):
        assert res["attacks"][a]["accuracy"] == np.mean([ok[(a, i)] for i in range(10)])
        assert res["attacks"][a]["judgements"]["worst"]["accuracy"] == res["attacks"][a]["accuracy"]
    robust = [all(ok[(a, i)] for a in (BLIND_ATTACK, FULL_ATTACK)) for i in range(10)]
    assert res["robust"].tolist() == robust and res["worst_case"]["accuracy"] == np.mean(robust)
    assert res["worst_case"]["accuracy"] <= min(v["accuracy"] for v in res["attacks"].values())
    assert max(r["linf"] for r in recs) <= 0.1 + 1e-6 and min(r["linf"] for r in recs if r["attack"] != "clean") > 0
    assert sorted(p.name for p in (tmp_path / "examples").iterdir())[:1] == [f"{BLIND_ATTACK}__0.npz"]
    assert res["robust"].sum() < 10  # the attacks break something: the test can tell a no-op attack


def test_a_kill_mid_block_resumes_to_the_uninterrupted_records(digits, tmp_path, monkeypatch):
    clf, x, y, train = digits
    kw = dict(attacks=(FULL_ATTACK,), **KW)
    whole = evaluate_robustness(clf, purifier(train), x[:10], y[:10], run_dir=tmp_path / "whole", **kw)
    real, calls = engine.run_block, []

    def cut(cell, *a, **k):
        calls.append(cell.key)
        if len(calls) == 5:  # clean's three blocks, the attack's first, then killed in its second
            raise KeyboardInterrupt
        return real(cell, *a, **k)

    monkeypatch.setattr(engine, "run_block", cut)
    with pytest.raises(KeyboardInterrupt):
        evaluate_robustness(clf, purifier(train), x[:10], y[:10], run_dir=tmp_path / "cut", **kw)
    kept = (tmp_path / "cut" / "records" / "rank-0.jsonl").read_text().splitlines()
    assert len(kept) == 14  # 10 clean + the attack's first block of 4
    monkeypatch.setattr(engine, "run_block", real)
    resumed = evaluate_robustness(clf, purifier(train), x[:10], y[:10], run_dir=tmp_path / "cut", **kw)
    lines = lambda d: sorted((d / "records" / "rank-0.jsonl").read_text().splitlines())  # noqa: E731
    assert lines(tmp_path / "cut") == lines(tmp_path / "whole")
    assert resumed["robust"].tolist() == whole["robust"].tolist()


def test_a_changed_setting_is_refused_and_a_new_attack_added(digits, tmp_path, monkeypatch):
    clf, x, y, train = digits
    evaluate_robustness(clf, purifier(train), x[:8], y[:8], attacks=(BLIND_ATTACK,), run_dir=tmp_path, **KW)
    with pytest.raises(ValueError, match=r"records for clf-pgd made with other settings: budget.eps 0.1 \(now 0.2\)"):
        evaluate_robustness(clf, purifier(train), x[:8], y[:8], attacks=(BLIND_ATTACK,), run_dir=tmp_path,
                            **{**KW, "eps": 0.2})  # fmt: skip
    with pytest.raises(ValueError, match=r"records for clean made with other settings: repeats 3 \(now 2\)"):
        evaluate_robustness(clf, purifier(train), x[:8], y[:8], attacks=(BLIND_ATTACK,), run_dir=tmp_path,
                            **{**KW, "repeats": 2})  # fmt: skip
    ran, real = [], engine.run_block
    monkeypatch.setattr(engine, "run_block", lambda cell, *a, **k: ran.append(cell.key) or real(cell, *a, **k))
    res = evaluate_robustness(clf, purifier(train), x[:8], y[:8], attacks=(BLIND_ATTACK, FULL_ATTACK),
                              run_dir=tmp_path, **KW)  # fmt: skip
    assert ran == [(FULL_ATTACK,)] * 2 and set(res["attacks"]) == {BLIND_ATTACK, FULL_ATTACK}  # only the new one
    with pytest.raises(ValueError, match="Unknown attacks"):
        evaluate_robustness(clf, None, x[:8], y[:8], attacks=("nope",), run_dir=tmp_path / "n", **KW)
    with pytest.raises(ValueError, match="x must be N×C×H×W"):
        evaluate_robustness(clf, None, x[:8, 0], y[:8], run_dir=tmp_path / "n", **KW)


def test_autoattack_is_an_attack_of_the_entry_point(digits, tmp_path):
    """AutoAttack (standard, torchattacks) as a row of the entry point, on an undefended classifier: the same examples
    as torchattacks' own call with the block's attack seed (the engine's scheme), judged the same."""
    import torchattacks

    clf, x, y, _ = digits
    res = evaluate_robustness(clf, None, x[:8], y[:8], eps=0.15, attacks=(AUTOATTACK,), ensemble_size=1,
                              repeats=1, run_dir=tmp_path, progress=False)  # fmt: skip
    attack = torchattacks.AutoAttack(clf, norm="Linf", eps=0.15, version="standard", n_classes=10,
                                     seed=SeedPlan("shared", 0, (AUTOATTACK,))(0, 0).attack % 2**31)  # fmt: skip
    direct = clf(attack(torch.as_tensor(x[:8]), torch.as_tensor(y[:8]))).argmax(1).numpy() == y[:8]
    assert res["robust"].tolist() == direct.tolist() and res["attacks"][AUTOATTACK]["accuracy"] == direct.mean()
    assert res["clean"]["accuracy"] > res["worst_case"]["accuracy"]  # it breaks something


def test_a_run_judged_again_gives_its_own_predictions_and_a_larger_r_adds_judgements_after_them(digits, tmp_path):
    """rejudge_robustness: the kept examples of each block judged again with the engine's seed scheme, without the
    attack: at the run's R and seed its own predictions, at a larger R the run's first, so the worst of R can only
    fall; another seed draws other noise; another classifier or defence than the run's is refused."""
    from art_adp.runs.records import read_jsonl

    clf, x, y, train = digits
    res = evaluate_robustness(clf, purifier(train), x[:10], y[:10], attacks=(BLIND_ATTACK,), run_dir=tmp_path, **KW)
    own = {r["index"]: r["pred"] for r in read_jsonl(tmp_path / "records" / "rank-0.jsonl") if r["attack"] == BLIND_ATTACK}
    out = engine.rejudge_robustness(clf, purifier(train), tmp_path, progress=False)
    assert {r["index"]: r["pred"] for r in read_jsonl(tmp_path / "rejudged-S2-R3-seed0.jsonl")} == own
    (cell,) = out["cells"]
    assert cell["cell"] == [BLIND_ATTACK] and cell["n"] == 10
    theirs = res["attacks"][BLIND_ATTACK]
    assert (cell["accuracy"], cell["ci95"]) == (theirs["accuracy"], theirs["ci95"])
    more = engine.rejudge_robustness(clf, purifier(train), tmp_path, repeats=8, progress=False)
    eight = {r["index"]: r["pred"] for r in read_jsonl(tmp_path / "rejudged-S2-R8-seed0.jsonl")}
    assert all(eight[i][:3] == p and len(eight[i]) == 8 for i, p in own.items())
    assert more["cells"][0]["accuracy"] <= cell["accuracy"]
    engine.rejudge_robustness(clf, purifier(train), tmp_path, seed=1, progress=False)
    fresh = {r["index"]: r["pred"] for r in read_jsonl(tmp_path / "rejudged-S2-R3-seed1.jsonl")}
    assert fresh.keys() == own.keys() and fresh != own
    other = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with pytest.raises(ValueError, match="measured with another classifier or defence: classifier_sha256"):
        engine.rejudge_robustness(other, purifier(train), tmp_path, progress=False)
    wider = ADPPurifier(KernelScore(train, bandwidth=0.25), sigma=0.5, steps=1, step_size=0.25, tau=0.0)
    with pytest.raises(ValueError, match=r"defences.0.sigma 0.25 \(now 0.5\)"):
        engine.rejudge_robustness(clf, wider, tmp_path, progress=False)
    with pytest.raises(ValueError, match="holds no kept adversarial examples"):
        engine.rejudge_robustness(clf, purifier(train), tmp_path / "nothing", progress=False)


def test_the_purifier_builder_is_describe_defences_inverse(digits):
    """build_defence(describe_defence(p)) is p again: the same description, and with the same seed the same draws."""
    _, x, _, train = digits
    score = KernelScore(train, bandwidth=0.25)
    p = ADPPurifier(score, sigma=0.2, steps=2, step_size=0.1, tau=0.0, clip_noise=False, gradient="full",
                    generator=torch.Generator().manual_seed(4))  # fmt: skip
    q = engine.build_defence(engine.describe_defence(p), score, seed=4)
    assert engine.describe_defence(q) == engine.describe_defence(p) and q.generator is not None
    xt = torch.as_tensor(x[:3])
    assert torch.equal(p.forward(xt)[0], q.forward(xt)[0])
    with pytest.raises(ValueError, match=r"type must be one of \['ADPPurifier', 'ReverseDiffusionPurifier', "):
        engine.build_defence({"type": "Mine"}, score)


def test_one_accuracy_cell_format():
    from art_adp.runs.render import accuracy_cell

    assert accuracy_cell(0.095, (0.0606, 0.1434), 200, precision="bf16") == "9.5 [6–14] (200; bf16 gradient passes)"
    assert accuracy_cell(0.5, (0.15, 0.85)) == "50.0 [15–85]"
    assert accuracy_cell(1.0, (float("nan"), float("nan")), 0) == "100.0 (0)"
    assert accuracy_cell(0.25, None, 4) == "25.0 (4)"


def test_one_table_renderer_draws_the_header_its_rule_and_each_row_and_refuses_a_ragged_row():
    from art_adp.runs.render import markdown_table

    assert markdown_table(["a", "b"], [[1, "x"], ["", 2.5]]) == ["| a | b |", "|---|---|", "| 1 | x |", "|  | 2.5 |"]
    assert markdown_table(["only"], []) == ["| only |", "|---|"]
    with pytest.raises(ValueError, match=r"A table row has 1 cells for 2 columns: \['x'\]\."):
        markdown_table(["a", "b"], [["x"]])


def test_an_attack_as_data_resolves_to_the_registry_none_or_the_kept_examples(digits, tmp_path):
    clf, x, y, _ = digits
    est = defended_estimator(clf, None, input_shape=(1, 8, 8))
    idx, seeds = np.array([3, 1]), SeedPlan("apart", 0)(0, 1)
    xb = x[idx]
    assert engine.attack_of(engine.Attacking())(est, xb, y[idx], idx, seeds) is xb  # clean: the images themselves
    budget = Budget(eps=0.1, eps_step=0.05, max_iter=3, random_start=False)
    pgd = engine.attack_of(engine.Attacking(BLIND_ATTACK, budget))(est, xb, y[idx], idx, seeds)
    assert 0 < np.abs(pgd - xb).max() <= 0.1 + 1e-6  # the registry's Clf-PGD at the budget
    np.save(tmp_path / "made.npy", x[::-1].copy())
    kept = engine.attack_of(engine.Attacking(examples="made.npy"), tmp_path)(est, x[idx], y[idx], idx, seeds)
    assert np.array_equal(kept, x[::-1][idx])  # read at the block's indices
    np.savez(tmp_path / "made.npz", x=x[::-1].copy())  # or a .npz of one array
    kept = engine.attack_of(engine.Attacking(examples="made.npz"), tmp_path)(est, x[idx], y[idx], idx, seeds)
    assert np.array_equal(kept, x[::-1][idx])
    with pytest.raises(ValueError, match=r"^Unknown attack 'pgd-9'; choose from \['clean', 'clf-pgd', "):
        engine.Attacking("pgd-9")
    with pytest.raises(ValueError, match=r"the attack 'clf-pgd' needs its budget: Attacking\('clf-pgd', Budget"):
        engine.Attacking(BLIND_ATTACK)
    with pytest.raises(ValueError, match="the examples 'made.npy' are read from a run folder: give run_dir."):
        engine.attack_of(engine.Attacking(examples="made.npy"))
