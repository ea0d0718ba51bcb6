"""The archive: the record type, the msgpack format and its versions, writing (rotation,
compression), reading (scan, resync past damage, re-ordering), the one validity check,
columnar loading, and whole-archive operations (merge, slice, peak, export)."""
