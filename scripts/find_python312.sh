# Sourced by setup_env.sh: find a Python 3.12 interpreter or explain why not.
#
# LeRobot 0.6.1 needs Python >= 3.12 and the ROS 2 Kilted wheels exist for
# CPython 3.11 and 3.12 only, so 3.12 is the one version that serves both.
# LEROBOT_ROS_PYTHON, when set, is the only candidate considered.

lerobot_ros_python_version() {
  "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null
}

# A venv's python is the interpreter it was made from (python3.12 on PATH is
# the venv's own once its bin/ is on PATH, as the README has users do for
# `ros2`): a new venv is made from that base, never from another venv.
lerobot_ros_base_python() {
  "$1" -c 'import sys; print(sys._base_executable if sys.prefix != sys.base_prefix else sys.executable)'
}

# What identifies the interpreter in the set-up's hash: its installation and
# version, not the path that reached it (pyenv's python, python3.12, a venv's).
lerobot_ros_python_identity() {
  "$1" -c 'import sys; print(sys.base_prefix, "%d.%d.%d" % sys.version_info[:3])'
}

lerobot_ros_find_python312() {
  local candidates=() candidate version
  if [ -n "${LEROBOT_ROS_PYTHON:-}" ]; then
    candidates=("$LEROBOT_ROS_PYTHON")
  else
    command -v python3.12 >/dev/null 2>&1 && candidates+=("$(command -v python3.12)")
    local pyenv_root
    pyenv_root="$( (pyenv root 2>/dev/null) || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
    for candidate in "$pyenv_root"/versions/3.12.*/bin/python /usr/bin/python3.12 /usr/local/bin/python3.12; do
      [ -x "$candidate" ] && candidates+=("$candidate")
    done
  fi
  for candidate in "${candidates[@]}"; do
    version="$(lerobot_ros_python_version "$candidate")"
    case "$version" in
      3.12.*) lerobot_ros_base_python "$candidate"; return 0 ;;
    esac
  done

  {
    echo "error: lerobot_ros needs a Python 3.12 interpreter and found none."
    echo "  Why 3.12: LeRobot 0.6.1 requires Python >= 3.12, and the ROS 2 Kilted"
    echo "  wheels exist for CPython 3.11 and 3.12 only."
    if [ -n "${LEROBOT_ROS_PYTHON:-}" ]; then
      version="$(lerobot_ros_python_version "$LEROBOT_ROS_PYTHON")"
      echo "  LEROBOT_ROS_PYTHON=$LEROBOT_ROS_PYTHON is Python ${version:-?(could not run it)}."
    else
      echo "  Looked for python3.12 on PATH and in pyenv ($pyenv_root/versions/3.12.*)."
      if command -v python3 >/dev/null 2>&1; then
        echo "  python3 on PATH is Python $(lerobot_ros_python_version "$(command -v python3)")."
      fi
    fi
    echo "  Fix: install Python 3.12 (e.g. 'pyenv install 3.12') or set"
    echo "  LEROBOT_ROS_PYTHON=/path/to/python3.12."
  } >&2
  return 1
}
