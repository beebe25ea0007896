"""The trainer's device: dtype, how much the GPU holds, one GPU shared with the engine, the CPU form."""
