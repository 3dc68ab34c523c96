"""Try the package without hardware: a default policy (and, later, a simulated
robot) matched to a 6-joint SO-100/SO-101 style arm."""
