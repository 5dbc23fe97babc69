"""Benchmarks (run from the repository root: ``python -m bench`` writes the report).

Importing this package puts the installed build of formalgram before the checkout's source
on ``sys.path`` (:mod:`bench._checkout`): a benchmark measures the compiled build that is
served, not the source tree it is run from.
"""

from bench._checkout import place_checkout

place_checkout()
