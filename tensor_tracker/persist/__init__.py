"""Persistence: recordings written to disk and read back, and several ranks' records merged.

Builds on `tensor_tracker.data` (a frame's columns and type names); never unpickles, and
validates what it reads before allocating.

- `recording`: `RecordingWriter` streams a tracker's records to a directory step by step;
  `read_recording` reads one back (Arrow IPC, safetensors, JSON).
- `ranks`: the records of several ranks in one tracker: `Part`, `merge`, `part_of`, and
  the combined frame of a distributed run.
"""
