"""Text -> token ids and back: the BPE tokenizer, the SentencePiece backend of imported Marian
models, and the source/target ``Vocabularies`` of a run."""

from transformer.text.sentencepiece import SentencePieceTokenizer, split_language_code
from transformer.text.tokenizer import (
    BOS, BYTE_TOKENS, EOS, JOINT_FILE, PAD, SPECIAL_TOKENS, SRC_FILE, TGT_FILE, UNK, WORD_BOUNDARY, BPETokenizer,
    Tokenizer,
)
from transformer.text.vocab import Vocabularies, load_tokenizer

__all__ = [
    "BOS", "BPETokenizer", "BYTE_TOKENS", "EOS", "JOINT_FILE", "PAD", "SPECIAL_TOKENS", "SRC_FILE", "SentencePieceTokenizer",
    "TGT_FILE", "Tokenizer", "UNK", "Vocabularies", "WORD_BOUNDARY", "load_tokenizer", "split_language_code",
]
