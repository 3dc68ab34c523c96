"""Everything that converts between ROS messages and plain Python/numpy values.

Nodes never fill or read message fields themselves; they call this package,
so field-by-field knowledge of every interface lives here and is unit-tested
here. One module per kind of message:

* ``control_plane``: capabilities, the open request, server and executor
  status, diagnostics (services and status topics);
* ``data_plane``: Observation and ActionChunk, their size bounds, camera
  payloads, capture records and the MAC that authenticates them;
* ``images``: camera frames (sensor_msgs Image / CompressedImage) <-> RGB arrays;
* ``output_modes``: the command messages a robot is driven with.

Importing the package imports nothing else, so launch files can list output
modes without ROS message packages being importable.
"""
