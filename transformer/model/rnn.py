"""The recurrent baseline: a bidirectional LSTM encoder and an attentional LSTM decoder.

The model the Transformer was measured against: attention first served an LSTM encoder-decoder
(Bahdanau, Cho & Bengio 2015; Luong, Pham & Manning 2015). Here:

* encoder: source embeddings -> a bidirectional LSTM (``hidden_size / 2`` units per direction,
  packed so padding never enters the recurrence) -> states ``h_1 .. h_S`` ``(B, S, H)``;
* decoder state at the start: ``tanh(W [h_fwd_last ; h_bwd_first])`` for every layer, cell 0;
* decoder step t (Luong et al. 3.1-3.3): ``s_t = LSTM([y_{t-1} ; h~_{t-1}], s_{t-1})`` (input
  feeding), weights ``a_t = softmax(score(s_t, h))`` over the real source positions, context
  ``c_t = sum_s a_ts h_s``, attentional vector ``h~_t = tanh(W_c [c_t ; s_t])``, logits ``W_o h~_t``.

``score`` is one of the core's functions (``transformer.model.scores``): additive (Bahdanau's
``v^T tanh(W q + U h)``, used here with the current state as the query, Luong's "concat"), dot or
general (Luong's ``h^T W q``). It plugs into the same interface as ``Transformer``, so the same
trainer, checkpoints, decoders and attention tools work with it::

    memory = model.encode(src, src_mask)                              # (B, S, H)
    cache = model.new_cache()
    logits = model.decode(tgt_step, memory, src_mask, cache=cache)    # (B, 1, V) per step

Letters: B batch, S source length, T target length, E embed_dim, H hidden_size, L layers, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from transformer.model.rnn_config import RNN_SCORES, RNNConfig
from transformer.model.scores import AdditiveScore, attend, build_score
from transformer.model.transformer import AttentionMaps, Transformer


@dataclass
class RNNCache:
    """The decoder's state between steps: LSTM ``h, c (L, B, H)``, the last attentional vector
    ``feed (B, E)``, and the additive score's projected keys ``(B, S, A)`` (computed once).

    Create with ``RNNSeq2Seq.new_cache()``; the first ``decode`` fills it from the memory.
    """

    h: Tensor | None = None
    c: Tensor | None = None
    feed: Tensor | None = None
    keys: Tensor | None = None
    length: int = 0  # target positions decoded so far

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (1-D long) in that order, e.g. the parents of surviving beams."""
        if index.dtype != torch.long or index.dim() != 1:
            raise ValueError(f"reorder index must be a 1-D long tensor, got {index.dtype} {tuple(index.shape)}")
        if self.h is not None:
            self.h, self.c = self.h.index_select(1, index), self.c.index_select(1, index)
            self.feed = self.feed.index_select(0, index)
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)


class RNNSeq2Seq(nn.Module):
    """Attentional LSTM encoder-decoder with the ``Transformer``'s encode / decode / forward interface."""

    def __init__(self, cfg: RNNConfig) -> None:
        super().__init__()
        self.config = cfg
        E, H = cfg.embed_dim, cfg.hidden_size
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, E)
        self.src_embed = self.tgt_embed if cfg.share_embeddings else nn.Embedding(cfg.src_vocab_size, E)
        self.encoder = nn.LSTM(E, H // 2, num_layers=cfg.n_encoder_layers, batch_first=True, bidirectional=True,
                               dropout=cfg.dropout if cfg.n_encoder_layers > 1 else 0.0)
        self.bridge = nn.Linear(H, cfg.n_decoder_layers * H)  # final encoder states -> initial decoder states
        self.decoder = nn.LSTM(E + (E if cfg.input_feeding else 0), H, num_layers=cfg.n_decoder_layers,
                               batch_first=True, dropout=cfg.dropout if cfg.n_decoder_layers > 1 else 0.0)
        self.score = build_score(RNN_SCORES[cfg.score], query_dim=H, key_dim=H,
                                 hidden_dim=cfg.attention_dim if cfg.score == "additive" else None)
        self.combine = nn.Linear(2 * H, E, bias=False)  # W_c [c_t ; s_t]
        self.output = nn.Linear(E, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self.dropout = nn.Dropout(cfg.dropout)
        for p in self.parameters():  # uniform(-0.1, 0.1), as in Sutskever et al. 2014 and Luong et al. 2015
            nn.init.uniform_(p, -0.1, 0.1)
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)

    # ------------------------------------------------------------------------------------------
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Source ids ``(B, S)`` and mask ``(B, S)`` (True = real token, padding at the end) -> states ``(B, S, H)``.

        Padded positions hold zeros and never influence the real ones.
        """
        Transformer._check_ids(src, "src", self.config.src_vocab_size)
        Transformer._check_mask(src_mask, src)
        B, S = src.shape
        lengths = self._lengths(src_mask, B, S)
        x = self.dropout(self.src_embed(src))  # (B, S, E)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True, total_length=S)  # (B, S, H)
        return self.dropout(states)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None, *,
               cache: RNNCache | None = None) -> Tensor:
        """Target ids ``(B, T)`` -> logits ``(B, T, V)``; position t sees targets ``<= t`` only.

        With a ``cache``, ``tgt`` holds only the new positions (usually one); the cache holds the
        recurrent state and is updated in place.
        """
        return self.output(self._decode(tgt, memory, src_mask, cache, need_weights=False)[0])

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, *,
                positions: Tensor | None = None) -> Tensor:
        """Teacher forcing: all target positions ``(B, T)`` -> logits ``(B, T, V)``; with a bool
        ``positions`` mask ``(B, T)`` only those positions' logits, as ``(N, V)`` (as ``Transformer.forward``)."""
        memory = self.encode(src, src_mask)
        if positions is None:
            return self.decode(tgt, memory, src_mask)
        if positions.shape != tgt.shape or positions.dtype != torch.bool:
            raise ValueError(f"positions must be a bool mask of the targets' shape {tuple(tgt.shape)}, "
                             f"got {positions.dtype} {tuple(positions.shape)}")
        Transformer._check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        return self.output(self._decode(tgt, memory, src_mask, None, need_weights=False)[0][positions])  # (N, V)

    def new_cache(self, *, initial_capacity: int | None = None) -> RNNCache:
        """An empty decoder state for incremental decoding (``initial_capacity`` is accepted and unused)."""
        return RNNCache()

    @torch.no_grad()
    def attention_maps(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> AttentionMaps:
        """The decoder's attention over the source: ``cross`` holds one ``(B, 1, T, S)`` map (one layer,
        one head: a row per decoder step); there is no self-attention, so ``encoder`` and
        ``decoder_self`` are empty."""
        Transformer._check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        weights = self._decode(tgt, self.encode(src, src_mask), src_mask, None, need_weights=True)[1]
        return AttentionMaps(encoder=[], decoder_self=[], cross=[weights.unsqueeze(1)])

    def num_parameters(self) -> int:
        """Distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------------------------------
    def _decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, cache: RNNCache | None, *,
                need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """-> attentional vectors ``(B, T, E)`` and, if asked, attention weights ``(B, T, S)``."""
        cfg = self.config
        Transformer._check_ids(tgt, "tgt", cfg.tgt_vocab_size)
        if memory.dim() != 3 or memory.shape[-1] != cfg.hidden_size or memory.shape[0] != tgt.shape[0]:
            raise ValueError(f"memory must have shape ({tgt.shape[0]}, S, {cfg.hidden_size}), got {tuple(memory.shape)}")
        B, S = memory.shape[:2]
        if src_mask is not None and src_mask.shape != (B, S):
            raise ValueError(f"src_mask {tuple(src_mask.shape)} does not match memory {(B, S)}")
        state = cache if cache is not None else RNNCache()
        if state.h is None:
            state.h, state.c, state.feed = self._initial_state(memory, src_mask)
            state.keys = self.score.U(memory) if isinstance(self.score, AdditiveScore) else None
        mask = src_mask.unsqueeze(1) if src_mask is not None else None  # (B, 1, S)
        emb = self.dropout(self.tgt_embed(tgt))  # (B, T, E)
        if not cfg.input_feeding:  # the recurrence does not depend on attention: one LSTM call
            s, (state.h, state.c) = self.decoder(emb, (state.h, state.c))  # (B, T, H)
            out, weights = self._attend(s, memory, mask, state.keys)
        else:
            outs, ws = [], []
            for t in range(tgt.shape[1]):
                x = torch.cat([emb[:, t], state.feed.to(emb.dtype)], dim=-1)  # (B, 2E)
                s = self._lstm_step(x, state).unsqueeze(1)  # (B, 1, H)
                o, w = self._attend(s, memory, mask, state.keys)
                state.feed = o[:, 0]
                outs.append(o)
                ws.append(w)
            out, weights = torch.cat(outs, dim=1), torch.cat(ws, dim=1)
        if not cfg.input_feeding:
            state.feed = out[:, -1]
        state.length += tgt.shape[1]
        return out, weights if need_weights else None

    def _lstm_step(self, x: Tensor, state: RNNCache) -> Tensor:
        """One time step of ``self.decoder`` (the same weights and equations as ``nn.LSTM``, gates i, f, g, o)
        for input ``x (B, in)``; updates ``state.h, state.c (L, B, H)`` and returns the top layer's output.

        A per-step ``nn.LSTM`` call costs milliseconds of set-up on CPU; these few operations do not.
        """
        hs, cs = [], []
        for layer in range(self.config.n_decoder_layers):
            if layer:
                x = nn.functional.dropout(x, self.decoder.dropout, self.training)  # as nn.LSTM between layers
            gates = (nn.functional.linear(x, getattr(self.decoder, f"weight_ih_l{layer}"),
                                          getattr(self.decoder, f"bias_ih_l{layer}"))
                     + nn.functional.linear(state.h[layer], getattr(self.decoder, f"weight_hh_l{layer}"),
                                            getattr(self.decoder, f"bias_hh_l{layer}")))  # (B, 4H)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * state.c[layer] + torch.sigmoid(i) * torch.tanh(g)
            x = torch.sigmoid(o) * torch.tanh(c)
            hs.append(x)
            cs.append(c)
        state.h, state.c = torch.stack(hs), torch.stack(cs)
        return x

    def _attend(self, s: Tensor, memory: Tensor, mask: Tensor | None, keys: Tensor | None) -> tuple[Tensor, Tensor]:
        """Decoder states ``s (B, T, H)`` -> attentional vectors ``(B, T, E)``, weights ``(B, T, S)``."""
        if keys is None:
            scores = self.score(s, memory)  # (B, T, S)
        else:  # AdditiveScore with U h computed once: v^T tanh(W s + U h)
            energy = torch.tanh(self.score.W(s).unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, A)
            scores = self.score.v(energy).squeeze(-1)
        context, weights = attend(scores, memory.to(scores.dtype), mask)  # (B, T, H), (B, T, S)
        out = torch.tanh(self.combine(torch.cat([context, s.to(context.dtype)], dim=-1)))
        return self.dropout(out), weights

    def _initial_state(self, memory: Tensor, src_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """``h_0 = tanh(W [forward state at the last real token ; backward state at the first])`` per layer."""
        B, S, H = memory.shape
        L = self.config.n_decoder_layers
        last = (src_mask.sum(dim=1).clamp(min=1) - 1) if src_mask is not None else memory.new_full((B,), S - 1).long()
        forward_final = memory[torch.arange(B, device=memory.device), last, : H // 2]  # (B, H/2)
        backward_final = memory[:, 0, H // 2 :]  # (B, H/2)
        h = torch.tanh(self.bridge(torch.cat([forward_final, backward_final], dim=-1)))  # (B, L * H)
        h = h.view(B, L, H).transpose(0, 1).contiguous()  # (L, B, H)
        return h, torch.zeros_like(h), h.new_zeros(B, self.config.embed_dim)

    @staticmethod
    def _lengths(src_mask: Tensor | None, B: int, S: int) -> Tensor:
        """Real lengths ``(B,)``; the mask must be a prefix (padding at the end). An all-padding row counts as 1."""
        if src_mask is None:
            return torch.full((B,), S, dtype=torch.long)
        lengths = src_mask.sum(dim=1)
        if src_mask.device.type == "cpu":  # reads values back: checked on CPU only (no device sync)
            prefix = torch.arange(S, device=src_mask.device) < lengths.unsqueeze(1)
            if not torch.equal(prefix, src_mask):
                raise ValueError("src_mask must mark a prefix of each row (padding at the end) for the RNN encoder")
        return lengths.clamp(min=1)
