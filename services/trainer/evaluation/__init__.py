"""Evaluation: pass@k on held-out tasks (periodic and one-shot), and task screening."""
