"""The AsyncGRPO trainer for Harbor tasks (TRL 1.16.0 + OpenEnv 0.10.0). Entry point: train.py."""
