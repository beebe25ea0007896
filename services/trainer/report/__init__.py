"""Reporting: where metrics go, the dashboard, the learning curve (CSV and PNG)."""
