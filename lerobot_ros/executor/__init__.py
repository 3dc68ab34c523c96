"""Robot side: chunk_executor_node and the plain-Python logic it adapts.

Invariant: nothing imported from here pulls in torch or LeRobot — it runs on
the small computer next to the robot (a test enforces it).
"""
