"""Answers in untrusted model output: extraction, normalization, equivalence, grouping.

* :mod:`.extract` — the final or probe answer of a text, and its canonical string form;
* :mod:`.equivalence` — whether two answers are the same (a bounded cascade over a
  restricted math parser; the private ``_*`` modules are its parts), and grouping of
  answers into equivalence classes;
* :mod:`.clustering` — grouping of open-ended answers (embeddings or token sets);
* :mod:`.grading` — optional reference grading with Math-Verify, offline only.
"""

from reasonserve.certainindex.answers.clustering import (
    EmbeddingClusterer,
    cluster_texts,
    embedding_model_available,
    jaccard_clusters,
)
from reasonserve.certainindex.answers.equivalence import (
    MAX_STEPS,
    AnswerClasses,
    Verdict,
    compare_answers,
    equivalent,
    group_answers,
)
from reasonserve.certainindex.answers.extract import (
    MAX_ANSWER_CHARS,
    MAX_TEXT_CHARS,
    extract_answer,
    extract_boxed,
    extract_probe_answer,
    normalize_answer,
    stated_answer,
)

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_STEPS",
    "MAX_TEXT_CHARS",
    "AnswerClasses",
    "EmbeddingClusterer",
    "Verdict",
    "cluster_texts",
    "compare_answers",
    "embedding_model_available",
    "equivalent",
    "extract_answer",
    "extract_boxed",
    "extract_probe_answer",
    "group_answers",
    "jaccard_clusters",
    "normalize_answer",
    "stated_answer",
]
