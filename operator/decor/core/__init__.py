"""Pure decisions: the control law, the planner, quotas, policy, pod builders, lifecycle and status. No I/O."""
