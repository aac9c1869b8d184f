"""What a person reads: tables, sentences and figures from results, and the notebooks' context."""
