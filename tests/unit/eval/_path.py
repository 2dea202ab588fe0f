"""Puts eval/ (the dq_eval package) on sys.path."""
import os
import sys

EVAL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "eval")
sys.path.insert(0, os.path.abspath(EVAL_DIR))
