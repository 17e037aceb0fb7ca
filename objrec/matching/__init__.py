"""Matching: blocked-GEMM 2-NN with Lowe's ratio test, grouping by object, geometric verification."""

from objrec.knn import BruteForceIndex, Matches, SpillIndex, knn2, ratio_match
from objrec.matching.database import DatabaseMatcher
from objrec.matching.verify import REASONS, Verified, VerifyParams, quad_checks, verify_homography
from objrec.types import Candidate, Rejection

__all__ = [
    "knn2",
    "ratio_match",
    "Matches",
    "BruteForceIndex",
    "SpillIndex",
    "DatabaseMatcher",
    "Candidate",
    "Rejection",
    "VerifyParams",
    "Verified",
    "verify_homography",
    "quad_checks",
    "REASONS",
]
