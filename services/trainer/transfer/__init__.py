"""Weight transfer: how new weights reach the engine after each step, and the check that they are served."""
