#!/usr/bin/env bash
# Generate lerobot_ros.msg / lerobot_ros.srv from msg/ and srv/ with the ROS 2
# wheels of a venv and install them into that venv: libraries into <venv>/lib
# (which the wheels' bootstrapper puts on LD_LIBRARY_PATH), the ament index and
# interface definitions into <venv>/share, and the generated Python modules
# into site-packages/lerobot_ros next to the pip-installed package.
#
# usage: scripts/build_interfaces.sh VENV [BUILD_DIR]
# A colcon workspace does not use this: colcon runs CMakeLists.txt directly.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:?usage: build_interfaces.sh VENV [BUILD_DIR]}" && pwd)"
build_dir="${2:-$root/build/interfaces}"
python="$venv/bin/python"
site_packages="$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"

mkdir -p "$build_dir"
# The venv's bin first: its cmake, python and the rosidl generator scripts.
export PATH="$venv/bin:$PATH"
export AMENT_PREFIX_PATH="$venv"
export CMAKE_PREFIX_PATH="$venv"

cmake -S "$root" -B "$build_dir" \
  -DLEROBOT_ROS_INTERFACES_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$build_dir/install" \
  -DPython3_EXECUTABLE="$python" \
  -DBUILD_TESTING=OFF \
  >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log" >&2; exit 1; }
cmake --build "$build_dir" --parallel "$(nproc)" >"$build_dir/build.log" 2>&1 \
  || { tail -n 60 "$build_dir/build.log" >&2; exit 1; }
cmake --install "$build_dir" >"$build_dir/install.log" 2>&1 \
  || { cat "$build_dir/install.log" >&2; exit 1; }

# rosidl installs the generated Python as a distribution of its own: an
# empty lerobot_ros/__init__.py and a lerobot_ros egg-info. Either would
# shadow the real package (pip's editable install or wheel), so copy only the
# generated modules, whatever order pip and this script ran in.
staged="$build_dir/install"
staged_package="$(echo "$staged"/lib/python3*/site-packages/lerobot_ros)"
[ -d "$staged_package" ] || { echo "error: no generated Python package under $staged" >&2; exit 1; }
cp -a "$staged"/lib/*.so "$venv/lib/"
mkdir -p "$venv/share" "$site_packages/lerobot_ros"
cp -a "$staged/share/." "$venv/share/"
for generated in "$staged_package"/*; do
  case "$(basename "$generated")" in
    __init__.py|__pycache__) ;;
    *) cp -a "$generated" "$site_packages/lerobot_ros/" ;;
  esac
done
echo "interfaces installed into $venv"
