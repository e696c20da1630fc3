"""Applications that write a run directory (records, resume, settings guard): evaluations, reproductions, tables."""
