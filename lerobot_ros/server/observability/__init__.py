"""What the server tells its operator: health, audit log, request capture, the HTTP endpoint."""
