#!/usr/bin/env bash
# Install ROS 2's command-line and launch tools (ros2cli and its verbs,
# launch, launch_ros, ros2launch, rosidl_runtime_py) and the interface
# packages they and the sim need (composition_interfaces, tf2_msgs) from a
# folder of their upstream sources into a venv with the ROS 2 wheels, where no
# ROS 2 install provides them. The source folder is never written to: each
# package is built from a copy under BUILD_DIR, as colcon builds in build/.
#
# usage: scripts/install_ros2_tools.sh VENV VENDOR_DIR [BUILD_DIR]
#   VENDOR_DIR  e.g. <repo>/../shared/vendor/ros2_tools (see its README.md)
#   BUILD_DIR   default <repo>/build/ros2_tools
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: install_ros2_tools.sh VENV VENDOR_DIR [BUILD_DIR]"
venv="$(cd "${1:?$usage}" && pwd)"
vendor="$(cd "${2:?$usage}" && pwd)"
build_dir="${3:-$root/build/ros2_tools}"
python="$venv/bin/python"

# The interface packages the tools import (launch_ros: composition_interfaces)
# or the sim publishes (tf2_msgs, for /tf).
interface_packages=(composition_interfaces tf2_msgs)
# The pure-Python packages: every folder with a setup.py.
python_packages=()
for folder in "$vendor"/*/; do
  [ -f "$folder/setup.py" ] && python_packages+=("$(basename "$folder")")
done
[ "${#python_packages[@]}" -gt 0 ] || { echo "error: no Python package (*/setup.py) in $vendor" >&2; exit 1; }
for package in "${interface_packages[@]}"; do
  [ -f "$vendor/$package/CMakeLists.txt" ] || { echo "error: $vendor/$package/CMakeLists.txt is missing" >&2; exit 1; }
done

. "$root/scripts/pip_install.sh"

# Their PyPI dependencies that the ROS 2 wheels and our extras do not bring:
# launch needs osrf_pycommon and lark (the wheels' rosidl_parser already
# brings lark-parser, the same `lark` module), ros2cli psutil, argcomplete,
# importlib-metadata, packaging, catkin_pkg (package.xml) and pyyaml.
missing=()
for requirement in osrf_pycommon:osrf-pycommon lark:lark psutil:psutil argcomplete:argcomplete \
    importlib_metadata:importlib-metadata packaging:packaging catkin_pkg:catkin_pkg yaml:pyyaml; do
  "$python" -c "import ${requirement%%:*}" 2>/dev/null || missing+=("${requirement#*:}")
done
[ "${#missing[@]}" -eq 0 ] || pip_install "$python" "${missing[@]}"

mkdir -p "$build_dir"
# The interface builds (CMake, mostly one core each) and the pip install share
# nothing but the venv's separate files: run them side by side.
build_interface_package() {
  local package=$1 started=$SECONDS
  "$root/scripts/build_interfaces.sh" "$venv" "$build_dir/interfaces-$package" "$vendor/$package" >/dev/null
  echo "ros2 tools: $package built in $((SECONDS - started)) s"
}
jobs_started=()
for package in "${interface_packages[@]}"; do
  build_interface_package "$package" &
  jobs_started+=("$!:$package")
done

started=$SECONDS
for package in "${python_packages[@]}"; do
  # pip builds in the source tree (build/, *.egg-info): build a copy.
  rm -rf "${build_dir:?}/$package"
  cp -a "$vendor/$package" "$build_dir/$package"
  chmod -R u+w "$build_dir/$package"
done
(cd "$build_dir" && pip_install "$python" --no-deps --no-build-isolation "${python_packages[@]/#/./}")
echo "ros2 tools: ${#python_packages[@]} Python packages installed in $((SECONDS - started)) s"

failed=()
for job in "${jobs_started[@]}"; do
  wait "${job%%:*}" || failed+=("${job#*:}")
done
[ "${#failed[@]}" -eq 0 ] || { echo "error: building ${failed[*]} failed (see above)" >&2; exit 1; }
