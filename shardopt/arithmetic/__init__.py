"""Model-free arithmetic of placed shards: access buckets, lookups, traffic bytes, memory, hot rows,
and the plan checks built on them. No timing here: the cost models add that."""
