"""The arithmetic domain, the chat-template path and the cost estimate."""

from evo.domains.arithmetic import ArithmeticEnv, score_completion
from evo.train.cost import estimate_cost
from evo.train.policy import HFPolicy, load_policy

from .conftest import small_recipe


def test_arithmetic_splits_are_deterministic_disjoint_and_stratified():
    a, b = ArithmeticEnv(), ArithmeticEnv()
    val, train = a.tasks("validation"), a.tasks("train")
    assert [t.prompt for t in val] == [t.prompt for t in b.tasks("validation")]
    assert len(val) == 90 and {t.stratum for t in val} == {"easy", "medium", "hard"}
    assert not {t.prompt for t in val} & {t.prompt for t in train}
    assert all(eval(t.prompt[:-1]) == t.answer for t in val)  # noqa: S307 (our own digits-only expressions)
    # Hard answers cannot be closed within a 4-token limit (4+ digits and the newline).
    assert min(len(str(t.answer)) for t in val if t.stratum == "hard") >= 4
    assert [t.prompt for t in ArithmeticEnv(seed=1).tasks("validation")] != [t.prompt for t in val]


def test_reward_components_of_typical_responses():
    comps, answer = score_completion("55\n", 55)
    assert comps == {"correctness": 1.0, "partial_credit": 1.0, "format": 1.0, "length": 1.0, "judge_if": 1.0}
    assert answer == "55"
    comps, answer = score_completion("5512", 55123)  # truncated: no closing newline, no final answer
    assert comps["correctness"] == 0.0 and comps["format"] == 0.0 and answer == ""
    assert comps["partial_credit"] == 0.8
    comps, _ = score_completion(" 5x\n", 55)
    assert comps["correctness"] == 0.0 and comps["judge_if"] < 1.0


def test_chat_template_renders_prompts_and_observation_deltas(tiny_model_dir):
    policy = load_policy(str(tiny_model_dir))
    tok = policy.tokenizer
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    chat = HFPolicy(policy.model, tok, "chat", use_chat_template=True)
    assert chat.decode(chat.encode_prompt("1+1=")) == "<user>1+1=\n<assistant>"
    assert chat.decode(chat.encode_observation("ok")) == "<user>ok\n<assistant>"
    plain = HFPolicy(policy.model, tok, "plain", use_chat_template=False)
    assert plain.decode(plain.encode_prompt("1+1=")) == "1+1="


def test_cost_estimate_is_the_token_upper_bound():
    recipe = small_recipe(**{"grpo.num_iterations": 2})
    cost = estimate_cost(recipe)
    # 3 steps x 4 prompts x 4 samples x 6 tokens; trained twice; eval 12 tasks x k=2 x 6 tokens.
    assert cost["tokens_generated"] == 3 * 4 * 4 * 6
    assert cost["tokens_trained"] == 2 * cost["tokens_generated"]
    assert cost["eval_tokens_generated"] == 12 * 2 * 6
