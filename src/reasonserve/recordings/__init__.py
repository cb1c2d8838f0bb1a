"""Loaders of recorded runs (read at run time from ``../shared/data``, never shipped):
JSONL files, self-consistency sample sets, PRM beam searches and rStar MCTS answer sheets.
Below both the replays (:mod:`reasonserve.replay`) and the simulator (:mod:`reasonserve.sim`),
which read the same recordings."""

from reasonserve.recordings.jsonl import read_jsonl
from reasonserve.recordings.sc import SCQuestion, load_samples, make_question
from reasonserve.recordings.search import load_mcts, load_prm_beams

__all__ = ["SCQuestion", "load_mcts", "load_prm_beams", "load_samples", "make_question", "read_jsonl"]
