#!/usr/bin/env python3
"""Build a tiny random-weight Llama that real vLLM (CPU build) can serve, from local files only.

No model can be downloaded on the machines llmtop is validated on, and llmtop only needs an engine
that schedules, batches, fills its KV cache and streams tokens: the weights' quality is irrelevant.
So: a byte-level BPE tokenizer trained on local text (the Python standard library's sources), a
chat template, and a 2-layer Llama with head dim 64 (vLLM's CPU attention backend accepts only some
head dims), saved in bf16 with save_pretrained.

The vocabulary has 32,000 tokens because `llmtop load` sends prompts as token ids drawn from
[1000, 30000) (clear of common vocabularies' special tokens); vLLM rejects ids beyond the
tokenizer ("Token id 29999 is out of vocabulary").

The tokenizer has no EOS token on purpose: a random model would otherwise stop at a random point,
and the burst experiments need every request to run to max_tokens (finished_reason "length").

Run it with the Python of the vLLM venv (it needs torch, transformers and tokenizers):
    python scripts/make_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def corpus(max_bytes: int) -> Iterator[str]:
    """Local text to train the tokenizer on, in a stable order: the stdlib's .py files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen = 0
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield text
        seen += len(text)
        if seen >= max_bytes:
            return


def build(out: Path, vocab_size: int, seed: int) -> None:
    """Train the tokenizer, build the model, save both into `out`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(24_000_000), trainer=trainer)
    if tok.get_vocab_size() < vocab_size:
        raise SystemExit(f"the local corpus gave only {tok.get_vocab_size()} tokens")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=None,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.save_pretrained(str(out))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {n_params / 1e6:.1f} M parameters, vocab {len(fast)}, saved to {out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to write the model into")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        build(args.out, args.vocab_size, args.seed)
    except ImportError as e:
        print(f"make_tiny_model: {e} (run it with the vLLM venv's python)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
