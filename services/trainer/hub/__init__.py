"""Hub publishing: the background pushes, the callback, the token check and the model card."""
