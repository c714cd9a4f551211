"""Example pipeline ``transformer_lm``: a small causal transformer language model (compute-bound).

Bottleneck: **compute**. The dataset is a tensor of token sequences held in memory, so a sample costs
one slice (microseconds), while a training step runs attention and feed-forward layers forward and
backward over every token of the batch: tens to hundreds of milliseconds on a small CPU. Almost no
time is spent waiting for data, so DataLoader workers cannot help; what can is how the math runs
(threads, autocast, torch.compile) and the batch size.

The tokens are drawn uniformly from a seeded generator: nothing is downloaded and the dataset is
deterministic. The model returns logits shaped (batch, vocab, time), the layout
``torch.nn.CrossEntropyLoss`` expects, so ``loss(model(inputs), targets)`` needs no custom step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset


class RandomTokens(Dataset):
    """``length`` random token sequences of ``seq_len + 1`` tokens; sample ``i`` is (tokens[:-1], tokens[1:])."""

    def __init__(self, length: int = 4096, seq_len: int = 64, vocab_size: int = 1000, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(vocab_size, (length, seq_len + 1), dtype=torch.int64, generator=generator)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sequence = self.tokens[index]
        return sequence[:-1], sequence[1:]


class TinyTransformerLM(nn.Module):
    """Decoder-only language model: token and position embeddings, a causal ``nn.TransformerEncoder``
    (pre-norm) and a linear head. Input (batch, time) int64 tokens; output (batch, vocab, time) logits."""

    def __init__(
        self,
        vocab_size: int = 1000,
        d_model: int = 128,
        num_layers: int = 2,
        num_heads: int = 4,
        dim_feedforward: int = 512,
        max_len: int = 64,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, dim_feedforward, dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)
        causal = torch.triu(torch.full((max_len, max_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        x = self.encoder(x, mask=self.causal_mask[:length, :length], is_causal=True)
        return self.head(x).transpose(1, 2)
