"""The TwitterAAE demographic dialect model (Blodgett, Green & O'Connor, EMNLP 2016): topic proportions of a text.

Used by the IMDB card (`imdb.py`) for the dialect attribute of early_stopping.md §6. The model's files are
`model_vocab.txt` (row i: `<count>\\t<token>`) and `model_count_table.txt` (row i: the expected counts N[w, k] of
token i in the four demographic topics, in the order AA, Hispanic, Asian/Other, White). The posterior follows the
repository's `predict.py` (datasets/twitteraae/PROVENANCE.md), written here for many documents at once:

1. phi[w, k] = (N[w, k] + 1) / T[k], T the column totals of the whole table (OOV row included);
2. tokens are lower-cased and kept only when in the vocabulary (`OOV`, upper-case, never matches);
3. no prediction (NaN) with fewer than 1 in-vocabulary token or an in-vocabulary share below 20%;
4. CVB0 with a symmetric Dirichlet prior alpha = 1: q_i = l_i = phi[w_i] / sum_k phi[w_i, k], Q = sum_i q_i, then
   `passes - 1` sweeps over the tokens in order, each token: Q -= q_i, q_i ~ l_i * (Q + alpha) normalised, Q += q_i;
   the output is Q / sum(Q).

Vectorised over documents: a sweep visits token position j of every document that has one at once (a loop over
positions, never over documents); within a document the tokens are updated in order, as in the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.errors import DataError

TOPICS = ("aa", "hispanic", "other", "white")
ALPHA = 1.0          # symmetric Dirichlet prior of predict.py
PASSES = 5           # predict.py's numpasses (the initialisation counts as the first)
MIN_COVERAGE = 0.2   # in-vocabulary share below which there is no prediction


class DialectModel:
    """phi (V x 4) and the token -> row map of the model files (or of any given counts, for tests)."""

    def __init__(self, vocab: list[str], counts: np.ndarray):
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 2 or counts.shape != (len(vocab), len(TOPICS)):
            raise DataError(f"TwitterAAE model: {len(vocab)} vocabulary rows but a count table of shape "
                            f"{counts.shape}; allowed: one row of {len(TOPICS)} topic counts per token")
        if not np.isfinite(counts).all() or (counts < 0).any():
            raise DataError("TwitterAAE model: the count table has negative or non-finite values")
        self.phi = (counts + 1.0) / counts.sum(0)
        self.index = {w: i for i, w in enumerate(vocab)}

    @classmethod
    def from_files(cls, vocab_path: Path, table_path: Path) -> DialectModel:
        vocab = [line.rsplit("\t", 1)[-1].strip()
                 for line in Path(vocab_path).read_text(encoding="utf-8").split("\n") if line.strip()]
        try:
            counts = np.loadtxt(table_path, dtype=np.float64, delimiter="\t", ndmin=2)
        except ValueError as err:
            raise DataError(f"{table_path}: malformed TwitterAAE count table ({err})") from None
        return cls(vocab, counts)

    def rows(self, tokens: np.ndarray) -> np.ndarray:
        """Vocabulary row of each lower-cased token, -1 when absent (a lookup per distinct token)."""
        codes, uniq = pd.factorize(pd.Series(tokens, dtype=object))
        rows = np.array([self.index.get(t, -1) for t in uniq], dtype=np.int64)
        return rows[codes] if len(codes) else np.zeros(0, np.int64)

    def posterior(self, doc: np.ndarray, tokens: np.ndarray, n_docs: int, passes: int = PASSES,
                  alpha: float = ALPHA) -> np.ndarray:
        """Topic proportions (n_docs x 4) of documents given as a flat token array in document order, `doc` the
        document index of each token (non-decreasing); NaN rows where the model gives no prediction."""
        doc = np.asarray(doc, dtype=np.int64)
        rows = self.rows(pd.Series(tokens, dtype=object).str.lower().to_numpy(dtype=object))
        total = np.bincount(doc, minlength=n_docs)
        keep = rows >= 0
        doc, rows = doc[keep], rows[keep]
        known = np.bincount(doc, minlength=n_docs)
        ok = (known >= 1) & (known >= MIN_COVERAGE * total)
        sel = ok[doc]
        doc, rows = doc[sel], rows[sel]
        lik = self.phi[rows]
        lik /= lik.sum(1, keepdims=True)
        q = lik.copy()
        Q = np.zeros((n_docs, len(TOPICS)))
        np.add.at(Q, doc, q)
        start = np.concatenate([[0], np.cumsum(np.bincount(doc, minlength=n_docs))])[:-1]
        pos = np.arange(len(doc)) - start[doc]                 # position of each token within its document
        order = np.argsort(pos, kind="stable")                 # tokens by position, documents ascending
        cuts = np.cumsum(np.bincount(pos)) if len(pos) else np.zeros(0, np.int64)
        layers = np.split(order, cuts[:-1]) if len(pos) else []
        for _ in range(passes - 1):
            for idx in layers:                                 # position j of every document at once
                d = doc[idx]
                Q[d] -= q[idx]
                new = lik[idx] * (Q[d] + alpha)
                new /= new.sum(1, keepdims=True)
                q[idx] = new
                Q[d] += new
        out = np.full((n_docs, len(TOPICS)), np.nan)
        out[ok] = Q[ok] / Q[ok].sum(1, keepdims=True)
        return out
