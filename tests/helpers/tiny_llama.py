"""Writes a tiny random Llama and its tokenizer into a folder, for a real vLLM to serve without the model hub.

Usage: PYTHON tiny_llama.py FOLDER (PYTHON: the vllm peer's interpreter, which has torch, transformers and tokenizers;
run by :func:`tests.helpers.vllm_server.tiny_llama`, which caches the folder per machine).

The tokenizer is a byte-level BPE trained here on a few sentences (any text tokenizes, every id decodes); the model is
transformers' ``LlamaForCausalLM`` with tiny dimensions and seeded random weights, saved as safetensors. Head size 64:
vLLM's CPU attention supports a fixed set of head sizes, and 64 is one of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SENTENCES = [
    "the trainer counts tokens while the rollout servers generate them",
    "a step begins and ends and the bridge reads what happened in between",
    "prometheus scrapes every target at its own pace",
    "one two three four five six seven eight nine ten",
]
SPECIAL = ["<s>", "</s>"]


def write(folder: Path) -> None:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(SENTENCES * 8, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)


if __name__ == "__main__":
    write(Path(sys.argv[1]))
