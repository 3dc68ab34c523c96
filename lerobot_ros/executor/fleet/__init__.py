"""The link to a fleet of replicas: discovery, placement, the warm standby and hedged requests,
rebalancing moves."""
