"""The embedded default policy: a tiny character-level causal LM built from a config.

Nothing here downloads anything. The tokenizer maps every printable ASCII
character plus newline and tab to one token, so any domain's text encodes; it is
a `tokenizers` BPE model with no merges, saved as a `PreTrainedTokenizerFast`
that `AutoTokenizer` loads from the checkpoint folder. The model is a small
`LlamaForCausalLM` (about 0.8M parameters with the defaults). Two pretrained
checkpoints ship: `builtin:tiny-char` (`evo/data/tiny-char/`, pretrained on
arithmetic alone: the embedded default) and `builtin:tiny-char-mix`
(`evo/data/tiny-char-mix/`, the same architecture pretrained on the arithmetic,
calc and patch mixture by `scripts/build_tiny_model.py`: what the calc and patch
recipes train). Tests use `build_tiny_model` to make throwaway models.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARACTERS = tuple(chr(i) for i in range(32, 127)) + ("\n", "\t")
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = {"tiny-char": "tiny-char", "tiny-char-mix": "tiny-char-mix"}  # builtin name -> folder under evo/data/


def build_char_tokenizer():
    """A char-level `PreTrainedTokenizerFast`: pad=0, bos=1, eos=2, unk=3, then the characters."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    # BPE without merges = one token per known character; unknown characters become <unk>.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.add_special_tokens(list(SPECIAL_TOKENS))
    core.decoder = decoders.Fuse()  # join characters without the default space separator
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_tiny_model(
    tokenizer=None,
    *,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int = 384,
    max_positions: int = 256,
    seed: int = 0,
):
    """A randomly initialised tiny `LlamaForCausalLM` for `tokenizer` (char-level by default)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer or build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        attention_dropout=0.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model, tokenizer


def save_tiny_model(model, tokenizer, out_dir: str | Path) -> Path:
    """Write a checkpoint folder that `AutoModelForCausalLM`/`AutoTokenizer` load."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
