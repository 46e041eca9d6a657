#!/usr/bin/env bash
# GPU smoke test of the paths the CPU suite cannot run: vLLM rollouts with weight sync,
# the DeepSpeed engine, FSDP2, then `evo eval`. No download: a small random-weight Qwen3
# model is built here from a config, with the repository's character tokenizer.
#
#   scripts/gpu_smoke.sh [WORKDIR]        # needs CUDA and `pip install -e '.[gpu]'` (vllm, deepspeed)
#
# Runs, 2 GRPO steps each (tiny-arithmetic, 8 prompts x 4 samples, bf16):
#   vllm      rollout.backend: vllm, grpo.engine: torch, one process (weights synced after each step)
#   deepspeed grpo.engine: deepspeed (ZeRO-2), HF rollouts, --launcher deepspeed, one process per GPU (at most 2)
#   fsdp2     grpo.fsdp: true + rollout.backend: vllm, --nproc = GPUs (at most 2; one GPU: FSDP2 over a world of one)
#   eval      evo eval of the vllm run's checkpoint: must reproduce that run's Avg@k
# and ends with one JSON line: tokens/s generated and s/step per run, each path "ok" or its
# first error line. Every run has its own time limit so the whole script ends within 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
EVO="$(dirname "$PY")/evo"
WORK=${1:-$(mktemp -d /tmp/evo-gpu-smoke-XXXXXX)}
mkdir -p "$WORK"
START=$(date +%s)
export VLLM_ENABLE_V1_MULTIPROCESSING=0   # evo sets it too; explicit here for the record
export TOKENIZERS_PARALLELISM=false

fail_json() { printf '{"ok": false, "error": "%s"}\n' "$1"; exit 1; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || fail_json "no CUDA device visible to torch"
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
NPROC=$(( NGPU >= 2 ? 2 : 1 ))

# A small random-weight Qwen3 (about 3M parameters) and the char tokenizer, saved locally.
"$PY" - "$WORK/model" <<'EOF' || fail_json "could not build the local model"
import sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from evo.train.tiny import build_char_tokenizer
tok = build_char_tokenizer()
config = Qwen3Config(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                     tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                     eos_token_id=tok.eos_token_id)
torch.manual_seed(0)
Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
EOF

recipe() {  # recipe NAME EXTRA_ROLLOUT EXTRA_GRPO
  cat > "$WORK/$1.yaml" <<EOF
name: smoke-$1
seed: 0
domain: {name: arithmetic, options: {n_train: 200, n_validation: 32}}
model: {name: $WORK/model, dtype: bfloat16, chat_template: false}
rollout: {prompts_per_step: 8, num_generations: 4, max_new_tokens: 16$2}
grpo: {steps: 2, learning_rate: 0.0001, micro_batch_size: 32$3}
eval: {k: 2, max_tasks: 32}
EOF
}
VLLM_OPTS=", backend: vllm, vllm: {enforce_eager: true, gpu_memory_utilization: 0.25, max_model_len: 512}"
recipe vllm "$VLLM_OPTS" ""
recipe deepspeed "" ", engine: deepspeed, deepspeed: {optimizer: {params: {torch_adam: true}}}"
recipe fsdp2 "$VLLM_OPTS" ", fsdp: true"

run() {  # run NAME SECONDS ARGS...: the status line of one path
  local name=$1 limit=$2; shift 2
  if timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; then
    echo ok
  else
    local rc=$? line
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "timed out after ${limit}s"; return; fi
    # evo's one-line error ("Error: ..."), else the last line it wrote; quotes and backslashes dropped for JSON
    line=$(grep -m1 '^Error: ' "$WORK/$name.err" || grep -v '^[[:space:]]*$' "$WORK/$name.err" | tail -1)
    line=$(printf '%s' "$line" | cut -c1-300 | tr -d '"\\')
    echo "${line:-exit $rc}"
  fi
}
S_VLLM=$(run vllm 140 "$EVO" train "$WORK/vllm.yaml" --out "$WORK/run-vllm" --json)
S_DS=$(run deepspeed 110 "$EVO" train "$WORK/deepspeed.yaml" --out "$WORK/run-deepspeed" --json \
       --nproc "$NPROC" --launcher deepspeed)
S_FSDP=$(run fsdp2 140 "$EVO" train "$WORK/fsdp2.yaml" --out "$WORK/run-fsdp2" --json --nproc "$NPROC")
S_EVAL=$(run eval 45 "$EVO" eval "$WORK/run-vllm/checkpoint" --json)

"$PY" - "$WORK" "$NGPU" "$NPROC" "$START" "$S_VLLM" "$S_DS" "$S_FSDP" "$S_EVAL" <<'EOF'
import json, sys, time
from pathlib import Path
work, ngpu, nproc, start = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
status = dict(zip(["vllm", "deepspeed", "fsdp2", "eval"], sys.argv[5:9]))

def figures(name):
    lines = (work / f"run-{name}" / "metrics.jsonl")
    if not lines.exists():
        return None
    m = [json.loads(x) for x in lines.read_text().splitlines() if x.strip()]
    gen_s = sum(x["time/generate_s"] for x in m) or float("nan")
    return {"steps": len(m), "tokens_per_s": round(sum(x["gen/tokens"] for x in m) / gen_s, 1),
            "s_per_step": round(sum(x["time/step_s"] for x in m) / len(m), 3),
            "reward_mean": round(m[-1]["reward/mean"], 4)}

if status["eval"] == "ok":  # the checkpoint's standalone evaluation must be the run's own
    try:
        ev = json.loads((work / "eval.out").read_text())
        run = json.loads((work / "run-vllm" / "summary.json").read_text())["eval"]
        if ev["avg_at_k"] != run["avg_at_k"]:
            status["eval"] = f"Avg@k {ev['avg_at_k']} != the run's {run['avg_at_k']}"
    except (OSError, ValueError, KeyError) as exc:
        status["eval"] = f"unreadable output: {exc}"
versions = {}
for mod in ("torch", "vllm", "deepspeed", "transformers"):
    try:
        versions[mod] = __import__(mod).__version__
    except Exception as exc:  # noqa: BLE001
        versions[mod] = f"missing ({type(exc).__name__})"
import torch
print(json.dumps({
    "gpu": torch.cuda.get_device_name(0), "gpus": ngpu, "nproc": nproc, "versions": versions,
    "paths": status, "runs": {name: figures(name) for name in ("vllm", "deepspeed", "fsdp2")},
    "wall_s": round(time.time() - start, 1), "workdir": str(work),
    "ok": all(v == "ok" for v in status.values()),
}))
EOF
