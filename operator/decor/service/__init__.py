"""The operator service: its configuration and metrics, the control loop, leader election, each job's period, the kopf handlers."""
