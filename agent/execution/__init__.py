"""Where and when a compile or an evaluation runs: the `executor.Executor` protocol and its leased local
form, the leases themselves (`leases`: compile slots, timing leases per GPU), and Ray (`ray_executor`)."""
