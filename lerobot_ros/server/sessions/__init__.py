"""The sessions a server holds: who may open one (contract and capacity), their registry, arrivals
and floods, their topics."""
