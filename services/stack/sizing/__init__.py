"""What the trainer's GPU holds, derived from measured memory: the dtypes (precision), how long a rollout fits
(limits), and how one GPU is split between engine and trainer (gpu_share). Pure: the trainer sizes its run by it,
preflight checks the same numbers before anything is paid for, and `scripts/compose --one-gpu` runs gpu_share on
the host."""
