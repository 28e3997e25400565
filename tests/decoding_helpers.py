"""Small models and batches shared by the decoder tests."""

import torch

from transformer.config import preset
from transformer.model import Transformer

PAD, BOS, EOS = 0, 1, 2
V = 20


def make_model(seed: int = 0, eos_bias: float = 0.5) -> Transformer:
    """A random tiny model whose outputs vary (untied output layer) and end at varied lengths."""
    torch.manual_seed(seed)
    model = Transformer(preset("tiny", src_vocab_size=V, tie_output=False, output_bias=True)).double().eval()
    with torch.no_grad():
        model.output.weight.mul_(0.7)
        model.output.bias[EOS] = eos_bias
    return model


def make_batch(seed: int = 0, lengths=(8, 3, 6)):
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    src = torch.randint(3, V, (len(lengths), S), generator=g)
    mask = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]
    return src.masked_fill(~mask, PAD), mask


def row(src, mask, i):
    """Sentence ``i`` alone, padding cut away."""
    keep = mask[i]
    return src[i : i + 1, keep], mask[i : i + 1, keep]


def seq_log_prob(model, src, mask, tokens, *, ended: bool) -> float:
    """Teacher-forced log P(tokens [+ </s>]) of one sentence."""
    tgt = torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        lp = model(src, tgt, mask)[0].log_softmax(-1)  # (T, V)
    targets = tokens + ([EOS] if ended else [])
    return sum(float(lp[t, tok]) for t, tok in enumerate(targets))


class CopiedMemoryModel:
    """The model without ``supports_grouped_memory``: every beam gets its own copy of the memory."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def encode(self, *args):
        return self.model.encode(*args)

    def new_cache(self, **kwargs):
        return self.model.new_cache(**kwargs)

    def decode(self, *args, **kwargs):
        return self.model.decode(*args, **kwargs)
