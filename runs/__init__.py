"""A run's bookkeeping, apart from the judgement of numbers (``accuracy``): results folders and
files (``results``), the checked merge of shards (``merge``), two runs record by record
(``record_diff``), the manifest and the measured platform facts it carries (``manifest``,
``platform_facts``), statistics over seeds (``seed_stats``) and output paths that never overwrite (``output_paths``).
``python -m runs merge|diff``."""
