"""The served LeRobot policy: families, loading, warm-up and the torch part of a request (the only
torch on the server's path)."""
