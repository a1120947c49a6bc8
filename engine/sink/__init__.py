"""The operator's side of the sink (agent/sink/ is the node's): where a run's outputs lie
in it, the check at submit, landing outputs from it, and `swjob pull`."""
