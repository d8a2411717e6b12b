"""Data: what was recorded, arranged for reading (tables, selections, series).

Needs no plotting library, so figures, viewers, reports and exporters all build on it.
Saving and loading recordings lives in `tensor_tracker._persist`, running a model once
with temporary hooks (summary, graphs) in `tensor_tracker._probe`; both build on this one.

- `frame`: `to_frame`, the recording as a pandas DataFrame, and the per-stash statistics
  the other modules read.
- `select`: which stashes a plot or viewer shows: modules, steps, calls, display names.
- `series`: the numbers behind the histogram and scale figures (bins, statistic values).
- `history`: a statistic per module and step, for the history figures.
- `embedding`: the layers, tokens and 2-D embedding (UMAP or PCA) behind embedding plots.
- `depth`: repeated blocks, roles inside a block and leaf modules, from module names.
- `nonfinite`: `first_nonfinite`, where the first NaN or infinity appeared.
- `diagnose`: `diagnose`, a table of what looks wrong in a recording.
- `compare`: `compare`, two recordings aligned record by record, where they first differ.
- `differences`: the arithmetic of `compare`: errors, cosine, exact ULP distances.
- `samples`: `sample_values` and `sample_stats`, one batch item's values per channel at
  every module and every sample's statistics across the batch, from full copies.
- `channels`: `channel_table` and `outlier_channels`, a statistic per channel
  (`stats.per_channel`) by module and step, and the channels that stand out.
- `exponents`: `format_fractions`, every number format's overflow and underflow fractions
  read after the fact from the recorded exponent histogram (`"exp_hist"`).
"""
