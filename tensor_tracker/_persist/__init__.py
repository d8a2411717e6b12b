"""Persistence: recordings written to disk and read back, and several ranks' records merged.

Builds on `tensor_tracker._data` (a frame's columns and type names); never unpickles, and
validates what it reads before allocating.

- `recording`: `RecordingWriter` streams a tracker's records to a directory step by step,
  one checksummed commit per step; `read_recording` reads one back, checking all of it
  (the format: Arrow record batches, safetensors, JSON, a journal).
- `recording_codec`: how a recording encodes values, the statistics spec and its columns.
- `recording_reader`: a recording's commits read and checked, each whole or not at all.
- `integrity`: the writer's lock, append-only files cut back on failure, the journal's
  checksummed lines, bounded decompression and reads kept inside the recording.
- `ranks`: the records of several ranks in one tracker: `Part`, `merge`, `part_of`, and
  the combined frame of a distributed run.
"""
