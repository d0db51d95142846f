"""IMDB reviews (Maas et al. 2011), the seeded 10k train / 5k test subset, as bags of tokens for the FastText model
of early_stopping.md §1.5 / ambiguity 15, with the dialect attribute of §6 from the TwitterAAE model.

`read` parses the two JSON Lines files (label neg / pos, the review text); `encode`:
- tokenises every review with one regular expression (`TOKEN`: words with inner apostrophes, runs of other
  non-space characters) after replacing the HTML line breaks `<br />` by spaces, lower-cased — vectorised with
  pandas string methods (the spaCy / twokenize tokenisers of the thesis and of the TwitterAAE paper are not here);
- dialect (§6): the TwitterAAE posterior (`twitteraae.py`) of each review's tokens; `dialect_rule: non_sae`
  (spec: "Other American English" when the non-White share 1 - p_White exceeds p_White) or `aa_vs_white`
  (p_AA > p_White, the two topics the model's authors validated). Reviews without a prediction (in-vocabulary
  share < 20%) are dropped and counted. `privileged: sae`: s = 1 for Standard American English;
- group sampling (§6): in each split, up to `n_per_group` reviews per dialect group, half positive, half negative,
  capped by the smaller label cell of the group (few reviews are "other": the groups are far from equal); the
  realised sizes are in `meta["group_sizes"]` and in the run's metrics (`n_train`, ...). `n_per_group: null` keeps
  every review (groups unbalanced);
- FastText input (ambiguity 15): unigrams plus the bigrams of consecutive tokens; a vocabulary of the
  `vocab_size` most frequent of them in the training reviews of the sample (ids 2.., 0 = `<unk>`, 1 = `<pad>`, as
  the tutorial configuration the spec names); each review becomes the bag of its distinct token ids with weights
  count / length (what mean pooling reads), padded with id 1 and weight 0 to the longest bag. `X` holds the ids in
  its first half and the weights in its second (`meta["bag_width"]`), float32 (ids below 2**24 are exact).
  The vocabulary is read off the training reviews, as in the thesis: it is not covered by the DP guarantee
  (`meta["vocabulary_from"] = "train"`; the plugins say so).
The original train / test split is kept (`row_is_test`). Parsed tables are cached like every other card.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.datasets import Table
from privfair_cli.datasets.twitteraae import TOPICS, DialectModel
from privfair_cli.errors import ConfigError, DataError

VIEWS = ("tokens",)
TOKEN = r"[a-z0-9]+(?:'[a-z0-9]+)*|[^\sa-z0-9]+"
UNK, PAD = 0, 1
LABELS = {"neg": 0, "pos": 1}
DIALECT_RULES = ("non_sae", "aa_vs_white")


def read(paths, card) -> dict:
    check_card(card)
    files = dict(zip(card["files"], paths, strict=True))
    rows = []
    for name, path in files.items():
        if not name.endswith(".jsonl.gz"):
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    rows.append((r["split"], r["label"], r["text"]))
                except (ValueError, KeyError, TypeError) as err:
                    raise DataError(f"{name} line {i + 1}: not a review record with split, label and text "
                                    f"({type(err).__name__}: {err})") from None
    df = pd.DataFrame(rows, columns=["split", "label", "text"])
    bad = ~df["label"].isin(list(LABELS)) | ~df["split"].isin(["train", "test"]) | ~df["text"].map(type).eq(str)
    if bad.any():
        r = df[bad].iloc[0]
        raise DataError(f"imdb: {int(bad.sum())} record(s) with a label other than neg/pos, a split other than "
                        f"train/test or a non-text review (first: split={r['split']!r}, label={r['label']!r})")
    vocab = Path(files["model_vocab.txt"])
    return {"reviews": df, "dialect_model": (vocab, Path(files["model_count_table.txt"]))}


def tokenise(texts: pd.Series) -> pd.Series:
    """Tokens of every text as one Series indexed by the text's position (pandas string methods, no row loop)."""
    low = texts.reset_index(drop=True).str.replace("<br />", " ", regex=False).str.lower()
    return low.str.findall(TOKEN).explode().dropna()


def dialect(tokens: pd.Series, n: int, model: DialectModel, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(s, proportions): s = 1 for Standard American English, 0 for the other group, -1 without a prediction."""
    if rule not in DIALECT_RULES:
        raise ConfigError(f"data.dialect_rule={rule!r}; allowed: {', '.join(DIALECT_RULES)}")
    props = model.posterior(tokens.index.to_numpy(), tokens.to_numpy(), n)
    white, aa = props[:, TOPICS.index("white")], props[:, TOPICS.index("aa")]
    other = (1 - white > white) if rule == "non_sae" else (aa > white)
    s = np.where(np.isnan(white), -1, np.where(other, 0, 1))
    return s, props


def balanced_sample(y: np.ndarray, s: np.ndarray, is_test: np.ndarray, n_per_group: int | None,
                    rng: np.random.Generator) -> np.ndarray:
    """Rows kept: in each split and dialect group, the same number of positive and negative reviews, at most
    n_per_group / 2 each, capped by the smaller label cell of the group (spec §6: "capped by availability"), drawn
    at random; rows without a dialect are dropped. `None` keeps every row with a dialect."""
    ok = s >= 0
    if n_per_group is None:
        return np.flatnonzero(ok)
    keep = []
    for split in (False, True):
        for g in (0, 1):
            cells = [np.flatnonzero(ok & (is_test == split) & (s == g) & (y == c)) for c in (0, 1)]
            m = min([n_per_group // 2] + [len(c) for c in cells])
            if m == 0:
                raise DataError(f"imdb: dialect group {g} of the {'test' if split else 'train'} split has no "
                                f"review of one label (cell sizes {[len(c) for c in cells]}); allowed: a dialect "
                                f"rule that leaves both labels in both groups")
            keep += [rng.choice(c, size=m, replace=False) for c in cells]
    return np.sort(np.concatenate(keep))


def bags(tokens: pd.Series, n: int, train_rows: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, weights, V): every text's distinct unigram + bigram ids and count / length weights, padded; the
    vocabulary is the `vocab_size` most frequent tokens of the training texts."""
    doc = tokens.index.to_numpy()
    words = tokens.to_numpy(dtype=object)
    same = doc[1:] == doc[:-1]
    bigrams = pd.Series(words[:-1][same]) + " " + pd.Series(words[1:][same])
    grams = np.concatenate([words, bigrams.to_numpy(dtype=object)])
    gdoc = np.concatenate([doc, doc[:-1][same]])
    codes, uniq = pd.factorize(grams)
    in_train = np.isin(gdoc, train_rows)
    freq = np.bincount(codes[in_train], minlength=len(uniq))
    order = np.lexsort((np.arange(len(uniq)), -freq))[:vocab_size]   # most frequent first, ties by first sight
    order = order[freq[order] > 0]
    remap = np.full(len(uniq), UNK, np.int64)
    remap[order] = np.arange(2, 2 + len(order))
    ids = remap[codes]
    length = np.bincount(gdoc, minlength=n)
    if (length == 0).any():
        raise DataError(f"imdb: {int((length == 0).sum())} review(s) without a single token")
    V = 2 + len(order)
    key, count = np.unique(gdoc * V + ids, return_counts=True)
    bdoc, bid = key // V, key % V
    start = np.searchsorted(bdoc, np.arange(n))
    pos = np.arange(len(bdoc)) - start[bdoc]
    width = int(pos.max()) + 1
    I = np.full((n, width), PAD, np.float32)
    W = np.zeros((n, width), np.float32)
    I[bdoc, pos] = bid
    W[bdoc, pos] = count / length[bdoc]
    return I, W, V


def check_card(card) -> None:
    """The card's own keys, refused before any parsing."""
    rule = card.get("dialect_rule", "non_sae")
    if rule not in DIALECT_RULES:
        raise ConfigError(f"data.dialect_rule={rule!r}; allowed: {', '.join(DIALECT_RULES)}")
    n_per_group = card.get("n_per_group")
    if n_per_group is not None and (isinstance(n_per_group, bool) or not isinstance(n_per_group, int)
                                    or n_per_group < 2):
        raise ConfigError(f"data.n_per_group={n_per_group!r}; allowed: an integer >= 2 (reviews per dialect group "
                          f"and split, half of each label) or null (every review)")
    vocab_size = card.get("vocab_size", 25000)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ConfigError(f"data.vocab_size={vocab_size!r}; allowed: an integer >= 1")


def encode(raw: dict, card) -> Table:
    check_card(card)
    df = raw["reviews"]
    model = DialectModel.from_files(*raw["dialect_model"])
    tokens = tokenise(df["text"])
    y = df["label"].map(LABELS).to_numpy(np.int64)
    is_test = df["split"].eq("test").to_numpy()
    s, props = dialect(tokens, len(df), model, card.get("dialect_rule", "non_sae"))
    rows = balanced_sample(y, s, is_test, card.get("n_per_group"), np.random.default_rng(card.get("data_seed", 0)))
    dropped = int((s < 0).sum())
    sub = tokens[tokens.index.isin(rows)]
    new_index = np.searchsorted(rows, sub.index.to_numpy())
    sub = pd.Series(sub.to_numpy(), index=new_index)
    y, s, is_test, props = y[rows], s[rows], is_test[rows], props[rows]
    ids, weights, V = bags(sub, len(rows), np.flatnonzero(~is_test), card.get("vocab_size", 25000))
    X = np.concatenate([ids, weights], axis=1)
    sizes = {f"{split}_{name}": int(((is_test == (split == "test")) & (s == g)).sum())
             for split in ("train", "test") for g, name in ((1, "sae"), (0, "oae"))}
    meta = {"row_is_test": is_test, "vocab_size": V, "bag_width": ids.shape[1], "group_sizes": sizes,
            "no_dialect": dropped, "dialect_proportions": props, "vocabulary_from": "train",
            "sensitive_values": ["oae", "sae"]}
    names = [f"id{i}" for i in range(ids.shape[1])] + [f"w{i}" for i in range(ids.shape[1])]
    return Table(card["name"], X, y, s.astype(np.int64), names, meta=meta)
