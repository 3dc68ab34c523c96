"""The request cycle: the one request in flight, the observation it carries, and which chunk may
answer it.

Sensors are read (``sensor_node``, ``observation_assembly``) only when a
request is built; the network worker (``network_worker``) sends it and waits.
"""
