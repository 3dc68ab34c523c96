"""The control tick's parts: the action queue, playback (interpolation), the fail-safe state
machine and the safety envelope.

Nothing here waits on the network: the control loop's thread runs these at
the control rate.
"""
