"""`evo train` and `evo eval` as a user runs them."""

import json

import yaml
from click.testing import CliRunner

from evo.cli import main


def _recipe_file(tmp_path, **grpo):
    data = {
        "name": "cli-small",
        "seed": 1,
        "domain": {"name": "arithmetic", "options": {"n_validation": 9, "n_train": 30}},
        "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": 3, "num_generations": 2, "max_new_tokens": 5},
        "grpo": {"steps": 2, **grpo},
        "eval": {"k": 2, "seed": 9},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_train_then_eval_gives_the_same_avg_at_k(tmp_path):
    runner = CliRunner()
    recipe = _recipe_file(tmp_path)
    out = tmp_path / "run"
    res = runner.invoke(main, ["train", str(recipe), "--out", str(out), "--version", "v0", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["steps"] == 2 and summary["checkpoint_dir"] == str(out / "checkpoint")
    for name in ("rollouts.parquet", "metrics.jsonl", "eval.parquet", "eval.json", "summary.json", "recipe.json"):
        assert (out / name).exists(), name

    # `evo eval` of the checkpoint reads the run's recipe and reproduces the run's evaluation.
    res = runner.invoke(main, ["eval", str(out / "checkpoint"), "--json", "--out", str(tmp_path / "ev")])
    assert res.exit_code == 0, res.output
    ev = json.loads(res.output)
    assert ev["avg_at_k"] == summary["eval"]["avg_at_k"] and ev["per_stratum"] == summary["eval"]["per_stratum"]
    assert json.loads((tmp_path / "ev" / "eval.json").read_text())["avg_at_k"] == ev["avg_at_k"]

    # Human output: one summary, and a rerun reports the finished run instead of training again.
    res = runner.invoke(main, ["train", str(recipe), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "trained 2 steps" in res.output and "Avg@2:" in res.output


def test_eval_k_and_seed_options_and_base_model(tmp_path):
    runner = CliRunner()
    recipe = _recipe_file(tmp_path)
    args = ["eval", "builtin:tiny-char", "--recipe", str(recipe), "--json"]
    a = json.loads(runner.invoke(main, args + ["--k", "3", "--seed", "4"]).output)
    b = json.loads(runner.invoke(main, args + ["--k", "3", "--seed", "4"]).output)
    assert a == b and a["k"] == 3 and a["seed"] == 4 and a["n_tasks"] == 9


def test_recipe_errors_are_one_line_with_the_path(tmp_path):
    recipe = _recipe_file(tmp_path, num_iterations=0)
    res = CliRunner().invoke(main, ["train", str(recipe), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1
    line = res.output.strip()
    assert "\n" not in line and "grpo.num_iterations" in line and "0" in line
    bad_term = tmp_path / "bad.yaml"
    data = yaml.safe_load(recipe.read_text())
    data["grpo"] = {"steps": 1}
    data["reward"] = {"terms": [{"name": "correctness"}, {"name": "style"}]}
    bad_term.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["train", str(bad_term), "--out", str(tmp_path / "run2")])
    assert res.exit_code == 1
    assert "reward.terms[1].name: 'style'" in res.output and "partial_credit" in res.output
