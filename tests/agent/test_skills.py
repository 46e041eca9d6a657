"""Skills: loading (built-ins and the workspace's), evidence recording, `evo skills list`, harness analyzers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from evo.agent.skills import load_skills, parse_skill, update_skill_evidence
from evo.cli import main
from evo.errors import AgentError
from evo.resources import resource_dir

REQUIRED = {"std-group-filter", "dual-level-filter", "raise-generation-length", "continuous-partial-credit",
            "format-gate-repair", "instruction-following-judge-bonus", "multiplicative-efficiency-collapse"}


def test_builtins_load_with_their_fields():
    skills = {s.name: s for s in load_skills()}
    assert REQUIRED <= set(skills)
    harness = [s for s in skills.values() if s.kind == "harness"]
    assert len(harness) >= 2
    for s in harness:
        assert s.analyzer_source is not None and s.provides and "def analyze(ctx)" in s.analyzer_source.read_text()
    judge = skills["instruction-following-judge-bonus"]
    assert judge.patch == [{"path": "reward.terms", "op": "add_term", "value": {"name": "judge_if", "weight": 0.1, "mode": "add"}}]
    assert judge.backtest and "question" in judge.backtest
    negative = skills["multiplicative-efficiency-collapse"]
    assert negative.triggers == [] and negative.patch == []
    assert negative.refutes == [{"path": "reward.terms", "term": {"name": "efficiency", "mode": "factor"}}]
    assert all(s.body and s.source == "builtin" for s in skills.values())


def _write_skill(folder: Path, name: str, front: str, body: str = "text") -> Path:
    (folder / name).mkdir(parents=True, exist_ok=True)
    path = folder / name / "SKILL.md"
    path.write_text(f"---\n{front}---\n{body}\n")
    return path


def test_workspace_skill_overrides_a_builtin(tmp_path):
    _write_skill(tmp_path / "skills", "std-group-filter", "name: std-group-filter\ndescription: tuned copy\nkind: policy\n")
    _write_skill(tmp_path / "skills", "my-skill", "name: my-skill\ndescription: mine\n")
    skills = {s.name: s for s in load_skills(tmp_path)}
    assert skills["std-group-filter"].description == "tuned copy" and skills["std-group-filter"].source == "workspace"
    assert "my-skill" in skills and "raise-generation-length" in skills
    # the list form: exactly these folders, later ones winning
    listed = {s.name: s for s in load_skills([resource_dir("skills"), tmp_path / "skills"])}
    assert listed["std-group-filter"].description == "tuned copy" and listed["raise-generation-length"].source == "builtin"


@pytest.mark.parametrize("front, expected", [
    ("name: bad\ndescription: d\ntriggers:\n  - {metric: x, op: '~', value: 1}\n", "triggers[0]"),
    ("name: bad\ndescription: d\npatch:\n  - {path: rollout.max_new_tokens, op: multiply}\n", "patch[0].op"),
    ("name: other\ndescription: d\n", "differs from its folder"),
    ("name: bad\n", "description"),
])
def test_bad_front_matter_is_a_one_line_error_naming_the_file(tmp_path, front, expected):
    path = _write_skill(tmp_path, "bad", front)
    with pytest.raises(AgentError) as info:
        parse_skill(path)
    assert str(path) in str(info.value) and expected in str(info.value) and "\n" not in str(info.value)


def test_missing_front_matter(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text("# no front matter\n")
    with pytest.raises(AgentError, match="no YAML front matter"):
        parse_skill(tmp_path / "bad" / "SKILL.md")


def test_skill_evidence_is_recorded_idempotently_and_builtins_stay_untouched(tmp_path):
    shipped = resource_dir("skills") / "std-group-filter" / "SKILL.md"
    shipped_text = shipped.read_text()
    skills_dir = tmp_path / "skills"
    written = update_skill_evidence(skills_dir, "std-group-filter", "v2", "improvement", "arithmetic")
    target = skills_dir / "std-group-filter" / "SKILL.md"
    assert target in written and shipped.read_text() == shipped_text
    update_skill_evidence(skills_dir, "std-group-filter", "v5", "regression", "math")
    update_skill_evidence(skills_dir, "std-group-filter", "v7", "mixed", "math")
    # a resumed step records v7 again with its final outcome: replaced, not duplicated
    update_skill_evidence(skills_dir, "std-group-filter", "v7", "improvement", "math")
    assert update_skill_evidence(skills_dir, "std-group-filter", "v7", "improvement", "math") == []
    skill = parse_skill(target, source="workspace")
    assert skill.record() == {"uses": 3, "wins": 2, "losses": 1, "domains": ["arithmetic", "math"]}
    # a re-measure of v5's change replaces v5's verdict: one change counts once, by its better measurement
    update_skill_evidence(skills_dir, "std-group-filter", "v9", "improvement", "math", supersedes="v5")
    assert parse_skill(target, source="workspace").record() == {"uses": 3, "wins": 3, "losses": 0,
                                                                 "domains": ["arithmetic", "math"]}
    # everything but the evidence block is byte for byte what shipped
    strip = lambda t: [line for line in t.splitlines() if not line.startswith(("evidence:", "  - {version"))]  # noqa: E731
    assert strip(target.read_text()) == strip(shipped_text)


def test_a_version_proposed_under_a_renamed_skill_records_its_evidence_on_the_new_name(tmp_path):
    """drop-efficiency-factor became drop-efficiency-term: a step judged after the upgrade must not fail."""
    written = update_skill_evidence(tmp_path / "skills", "drop-efficiency-factor", "v1", "improvement", "calc")
    assert written == [tmp_path / "skills" / "drop-efficiency-term" / "SKILL.md"]
    assert parse_skill(written[0], source="workspace").record()["wins"] == 1


def test_harness_skill_copy_includes_its_analyzer(tmp_path):
    written = update_skill_evidence(tmp_path / "skills", "truncation-by-stratum", "v3", "improvement", "arithmetic")
    assert tmp_path / "skills" / "truncation-by-stratum" / "skill.py" in written


def test_unknown_skill_evidence(tmp_path):
    with pytest.raises(AgentError, match="no skill named 'nope'"):
        update_skill_evidence(tmp_path / "skills", "nope", "v1", "improvement", "arithmetic")


def test_evo_skills_list_shows_uses_wins_losses_domains(tmp_path):
    update_skill_evidence(tmp_path / "skills", "std-group-filter", "v2", "improvement", "swe")
    update_skill_evidence(tmp_path / "skills", "std-group-filter", "v4", "improvement", "math")
    update_skill_evidence(tmp_path / "skills", "raise-generation-length", "v1", "regression", "math")
    result = CliRunner().invoke(main, ["skills", "list", "-C", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert (rows["std-group-filter"]["uses"], rows["std-group-filter"]["wins"], rows["std-group-filter"]["domains"]) == (2, 2, ["math", "swe"])
    assert rows["raise-generation-length"]["losses"] == 1 and rows["dual-level-filter"]["uses"] == 0
    text = CliRunner().invoke(main, ["skills", "list", "-C", str(tmp_path)]).output
    line = next(line for line in text.splitlines() if line.startswith("std-group-filter"))
    assert "math, swe" in line and "(workspace)" in line


def _load_analyzer(skill: str):
    import importlib.util

    path = resource_dir("skills") / skill / "skill.py"
    spec = importlib.util.spec_from_file_location(f"skill_{skill.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_truncation_by_stratum_finds_truncation_hidden_in_one_stratum():
    # 3 strata x 20 samples; only "hard" truncates (45%), 15% overall.
    strata = ["easy"] * 20 + ["medium"] * 20 + ["hard"] * 20
    truncated = [False] * 40 + [True] * 9 + [False] * 11
    table = pa.table({"task_id": [f"t{i // 4}" for i in range(60)], "sample": [i % 4 for i in range(60)],
                      "stratum": strata, "truncated": truncated})
    out = _load_analyzer("truncation-by-stratum").analyze(SimpleNamespace(eval=table, rollouts=None))
    assert out["metrics"]["behavior/truncated_frac_max_stratum"] == pytest.approx(0.45)
    assert out["metrics"]["behavior/truncated_frac_stratum_spread"] == pytest.approx(0.45)
    (f,) = out["findings"]
    assert f["id"] == "behavior.truncation_by_stratum" and "hard" in f["message"] and "15%" in f["message"]
    assert len(f["evidence"]["rows"]) == 5
    quiet = pa.table({"stratum": strata, "truncated": [False] * 60})
    assert _load_analyzer("truncation-by-stratum").analyze(SimpleNamespace(eval=quiet, rollouts=None))["findings"] == []


def test_length_reward_coupling_sign():
    rng = np.random.default_rng(0)
    rows = []
    for g in range(10):
        lengths = rng.integers(5, 50, size=8)
        for s, n in enumerate(lengths):
            rows.append({"traj_id": f"s0-g{g}-{s}", "step": 0, "group": g, "num_tokens": int(n), "reward": float(n) / 50})
    table = pa.Table.from_pylist(rows)
    module = _load_analyzer("length-reward-coupling")
    out = module.analyze(SimpleNamespace(rollouts=table, eval=None, cache={}))
    assert out["metrics"]["behavior/length_reward_corr"] == pytest.approx(1.0)
    assert out["findings"][0]["id"] == "behavior.length_reward_coupling" and "longer" in out["findings"][0]["message"]
    flipped = table.set_column(table.schema.get_field_index("reward"), "reward", pa.array([1 - r["reward"] for r in rows]))
    out = module.analyze(SimpleNamespace(rollouts=flipped, eval=None, cache={}))
    assert out["metrics"]["behavior/length_reward_corr"] == pytest.approx(-1.0) and "shorter" in out["findings"][0]["message"]


def test_harness_skill_analyzers_pass_the_harness_loader(tmp_path):
    """The installed files follow the analyzer contract the harness enforces."""
    loader = pytest.importorskip("evo.harness.loader")
    for skill in ("truncation-by-stratum", "length-reward-coupling"):
        s = next(x for x in load_skills() if x.name == skill)
        (tmp_path / f"{s.analyzer}.py").write_text(s.analyzer_source.read_text())
    table = pa.table({"traj_id": ["a", "b", "c", "d"], "step": [0, 0, 0, 0], "group": [0, 0, 1, 1],
                      "num_tokens": [3, 9, 4, 8], "reward": [0.0, 1.0, 1.0, 0.0], "stratum": ["x", "x", "y", "y"],
                      "truncated": [False, True, False, False]})
    ctx = SimpleNamespace(rollouts=table, eval=None, recipe={}, settings={}, cache={})
    files = [f for f in loader.discover([tmp_path]) if f.name in ("truncation_by_stratum", "length_reward_coupling")]
    assert len(files) == 2
    for f in files:
        result = loader.run_analyzer(f, ctx)
        assert result.status == "ok", result.error
        assert result.layer == "behavior" and result.metrics


def test_the_skill_schema_names_exactly_the_operators_the_evaluator_knows():
    """skill.schema.json is the one description of a SKILL.md; its enums must not drift from the code."""
    from evo.agent.conditions import _COMPARE, PATCH_OPS, TERM_OPS
    from evo.schemas import load_schema
    from evo.vocabulary import Outcome

    schema = load_schema("skill")
    comparisons = schema["$defs"]["comparison"]["enum"]
    requirement_ops = schema["$defs"]["requirement"]["oneOf"][1]["properties"]["op"]["enum"]
    assert set(comparisons) == set(_COMPARE) and set(requirement_ops) == set(comparisons) | set(TERM_OPS)
    assert schema["properties"]["patch"]["items"]["properties"]["op"]["enum"] == list(PATCH_OPS)
    assert set(schema["properties"]["outcomes"]["items"]["enum"]) == {o.value for o in Outcome}
