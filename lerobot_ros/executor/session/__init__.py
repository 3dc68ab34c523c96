"""The executor's session with its policy server: handshake, session state, the ROS client and the
way back from OFFLINE."""
