"""What any engine that serves the policy shares with the services around it: where a turn ends (turn_end), which
chat template is served (template_fix, served_template), whether turns chain under it (chain), and the probe that
grades a running engine (probe). The production engine (services/engine) and its CPU stand-in
(services/mock_engine) apply these rules; scripts/status reads the records and runs the probe."""
