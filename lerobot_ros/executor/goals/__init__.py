"""RunPolicy goals: which one runs, the steps when one starts or ends, and the action server."""
