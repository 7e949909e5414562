"""Search: cut each table into candidates and choose one per table with ranks for its shards."""
