"""The local runtime: the same law on one machine, with processes, cgroups and a trace."""
