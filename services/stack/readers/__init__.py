"""Each service's settings reader, standard library plus `stack` only: the service reads its settings through
it at start, and preflight (in the trainer image) checks the same settings with the same rules without importing
the service or copying its files into another image."""
