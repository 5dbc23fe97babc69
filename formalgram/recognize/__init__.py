"""Recognizers and language enumeration: the Earley oracle, bounded enumeration, sampling."""

from __future__ import annotations

from formalgram.recognize.earley import EarleyRecognizer, accepts, is_prefix
from formalgram.recognize.enumerate import default_alphabet, enumerate_strings, sample

__all__ = ["EarleyRecognizer", "accepts", "default_alphabet", "enumerate_strings", "is_prefix", "sample"]
