"""Language-model engine: loading, scoring, generation.

transformers 5.x renames the decoder's `past_key_values` argument to `cache` (removed in 5.40) and
warns with a FutureWarning on every forward that uses the old name. The scorer and the generator
keep the old name, which every architecture accepts (also ones not yet migrated), so that warning
is silenced here: it told users nothing and printed a Python source line in the middle of a run.
"""
import warnings

warnings.filterwarnings("ignore", message=r"`past_key_values` is deprecated", category=FutureWarning)
