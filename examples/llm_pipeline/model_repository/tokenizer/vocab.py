"""The example's vocabulary, built from story.txt (no download): [UNK] is 0, [EOS] is 1,
then every word and punctuation mark of the story in the order it first appears. The
tokenizer, generator and detokenizer models all read it from here."""

from pathlib import Path

STORY = Path(__file__).with_name("story.txt")
UNK, EOS = "[UNK]", "[EOS]"


def story_words():
    return STORY.read_text(encoding="utf-8").split()


def vocabulary():
    vocab = {UNK: 0, EOS: 1}
    for word in story_words():
        vocab.setdefault(word, len(vocab))
    return vocab


def build_tokenizer():
    """A `tokenizers` WordLevel tokenizer over the vocabulary: lower-cased, split on
    whitespace and punctuation."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel(vocabulary(), unk_token=UNK))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    tokenizer.add_special_tokens([UNK, EOS])
    return tokenizer
