"""`evo analyze | compare | backtest` on plain run folders and in a real workspace."""

import json

import pytest
from click.testing import CliRunner

from evo.cli import main


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def runs(tmp_path, art):
    tasks = [f"t{i}" for i in range(12)]
    child = art.write_run(tmp_path / "child", rollouts_t=art.rollouts(), eval_t=art.eval_table({t: [1, 1, 1, 0] for t in tasks}))
    parent = art.write_run(tmp_path / "parent", rollouts_t=art.rollouts(), eval_t=art.eval_table({t: [1, 0, 0, 0] for t in tasks}))
    return child, parent


def test_analyze_plain_folder_writes_diagnosis_and_prints_digest(runs):
    child, parent = runs
    res = invoke("analyze", child, "--parent", parent)
    assert res.exit_code == 0, res.output
    assert "Avg@4 0.750" in res.output and "vs parent +0.500" in res.output
    assert (child / "diagnosis.json").exists() and (child / "diagnosis.md").exists()
    res = invoke("analyze", child, "--json")
    diag = json.loads(res.output)
    assert diag["metrics"]["score/avg_at_k"] == 0.75 and len(diag["harness_version"]) == 12


def test_analyze_loads_extra_analyzer_folder(runs, tmp_path):
    child, _ = runs
    extra = tmp_path / "mine"
    extra.mkdir()
    (extra / "broken.py").write_text("LAYER = 'signal'\ndef analyze(ctx):\n    raise KeyError('reward/judge')\n")
    diag = json.loads(invoke("analyze", child, "--analyzers", extra, "--json").output)
    assert any(f["id"] == "harness.analyzer_error" and "KeyError" in f["message"] for f in diag["findings"])


def test_compare_reports_outcome_and_interval(runs):
    child, parent = runs
    out = json.loads(invoke("compare", parent, child, "-B", 1000, "--json").output)  # baseline, then candidate
    assert out["outcome"] == "improvement"
    assert out["delta"] == pytest.approx(0.5) and out["n_tasks"] == 12 and out["k"] == 4 and out["B"] == 1000
    human = invoke("compare", child, parent)
    assert human.exit_code == 0 and human.output.splitlines()[1].startswith("regression")


def test_backtest_with_change_file(runs, tmp_path):
    child, _ = runs
    change = tmp_path / "change.yaml"
    change.write_text("filters:\n  std_group:\n    enabled: true\n    epsilon: 1.0e-6\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("domain: {name: arithmetic}\nmodel: {name: builtin:tiny-char}\n")
    out = json.loads(invoke("backtest", child, "--change", change, "--recipe", recipe, "--json").output)
    assert out["before"]["kept_trajectories"] == 48 and out["after"]["kept_trajectories"] == 48
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  terms: [{name: correctness}, {name: judge_if, weight: 0.1}]\n")
    res = CliRunner().invoke(main, ["backtest", str(child), "--change", str(bad), "--recipe", str(recipe)])
    assert res.exit_code == 1
    assert res.output.strip().startswith("Error: backtest: the change needs reward component 'judge_if'")
    assert len(res.output.strip().splitlines()) == 1


def test_backtest_reads_the_recipe_evo_train_saved_in_the_run_folder(runs, tmp_path):
    child, _ = runs
    change = tmp_path / "change.yaml"
    change.write_text("filters:\n  std_group:\n    enabled: true\n")
    assert "no recipe found" in CliRunner().invoke(main, ["backtest", str(child), "--change", str(change)]).output
    recipe = {"domain": {"name": "arithmetic"}, "model": {"name": "builtin:tiny-char"}}
    (child / "recipe.json").write_text(json.dumps({"recipe_hash": "x", "source": "recipe.yaml", "recipe": recipe}))
    out = json.loads(invoke("backtest", child, "--change", change, "--json").output)
    assert out["before"]["kept_trajectories"] == 48


def test_unknown_target_is_a_one_line_error(tmp_path):
    res = CliRunner().invoke(main, ["analyze", "v9", "-C", str(tmp_path)])
    assert res.exit_code == 1 and "'v9' is neither a run folder nor a version" in res.output


def test_workspace_versions_lineage_and_tampering_audit(tmp_path, art):
    from evo.lineage import Lineage
    from evo.settings import artifact_dir, load_settings

    ws = tmp_path / "ws"
    assert invoke("init", ws).exit_code == 0
    settings = load_settings(ws)
    tasks = {f"t{i}": [1, 0, 0, 0] for i in range(10)}
    art.write_run(artifact_dir(ws, settings, "base"), eval_t=art.eval_table(tasks))
    art.write_run(artifact_dir(ws, settings, "v0"), rollouts_t=art.rollouts(), eval_t=art.eval_table({t: [1, 1, 0, 0] for t in tasks}))
    diag = json.loads(invoke("analyze", "v0", "-C", ws, "--json").output)
    assert diag["version"] == "v0" and diag["audits"]["vetoed"] is False
    assert diag["metrics"]["version/delta_vs_parent"] == pytest.approx(0.25)  # v0 is compared with the base model
    assert (artifact_dir(ws, settings, "v0") / "diagnosis.md").exists()

    lin = Lineage.open(ws)
    tree = lin.create_version("v1", ["v0"])
    (tree / "data" / "validation").mkdir(parents=True)
    (tree / "data" / "validation" / "extra.jsonl").write_text("{}\n")
    (tree / "analyzers" / "truncation.py").write_text("LAYER = 'behavior'\ndef analyze(ctx):\n    return {'metrics': {'behavior/truncated_frac': 0.777}}\n")
    lin.commit_version("v1", "v1: sneak a validation file in")
    art.write_run(artifact_dir(ws, settings, "v1"), rollouts_t=art.rollouts(), eval_t=art.eval_table({t: [1, 1, 1, 1] for t in tasks}))
    diag = json.loads(invoke("analyze", "v1", "-C", ws, "--json").output)
    assert diag["audits"]["vetoed"] is True
    assert diag["audits"]["vetoes"][0]["evidence"]["paths"] == ["data/validation/extra.jsonl"]
    assert diag["metrics"]["behavior/truncated_frac"] == 0.777  # the version's own analyzer overrides the built-in
    cmp = json.loads(invoke("compare", "v0", "v1", "-C", ws, "--json").output)
    assert cmp["outcome"] == "improvement"  # vetoes are separate from the outcome class
    for command in ("compare", "analyze"):  # a version that does not exist is named so, not "run evo step"
        args = (command, "v0", "v9") if command == "compare" else (command, "v9")
        res = CliRunner().invoke(main, [*args, "-C", str(ws)])
        assert res.exit_code == 1 and "unknown version 'v9' (known: v0, v1)" in res.output, res.output
    assert cmp["delta"] == pytest.approx(0.5)
