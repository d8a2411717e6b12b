"""Data: what was recorded, arranged for reading (tables, selections, series).

Needs no plotting library, so figures, viewers, reports and exporters all build on it.

- `frame`: `to_frame`, the recording as a pandas DataFrame.
- `nonfinite`: `first_nonfinite`, where the first NaN or infinity appeared.
- `summary`: `summary`, one pass of a model summarised per module call.
"""
