#!/usr/bin/env bash
# Generate an interface package's Python, C and typesupport code with the
# ROS 2 wheels of a venv and install it into that venv: libraries into
# <venv>/lib (which the wheels' bootstrapper puts on LD_LIBRARY_PATH), the
# ament index and interface definitions into <venv>/share, and the generated
# Python package into site-packages.
#
# usage: scripts/build_interfaces.sh VENV [BUILD_DIR [PACKAGE_DIR]]
#   without PACKAGE_DIR: lerobot_ros's own msg/ and srv/ (CMakeLists.txt with
#     -DLEROBOT_ROS_INTERFACES_ONLY=ON); the generated modules go next to the
#     pip-installed package.
#   PACKAGE_DIR: another interface package's source (for example the vendored
#     composition_interfaces or tf2_msgs). It is never modified: its copy in
#     BUILD_DIR/source gets the wheel include fix and loses ADD_LINTER_TESTS.
# A colcon workspace does not use this: colcon runs CMakeLists.txt directly.
#
# The staged build in BUILD_DIR/install depends on nothing of the venv but its
# Python version and ROS 2 wheel versions (the libraries carry no RPATH): a
# second venv with the same ones (the robot profile beside the development
# one) reuses it instead of generating everything again.
#
# LEROBOT_ROS_STAGE_ONLY=1: build (or reuse) the staged build and stop; nothing
# is copied into the venv. scripts/setup_env.sh stages while pip installs the
# rest of the venv, then runs this again to install what was staged.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:?usage: build_interfaces.sh VENV [BUILD_DIR [PACKAGE_DIR]]}" && pwd)"
build_dir="${2:-$root/build/interfaces}"
package_dir="${3:-}"
python="$venv/bin/python"
site_packages="$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"

mkdir -p "$build_dir"
build_dir="$(cd "$build_dir" && pwd)"
cmake_options=()
if [ -z "$package_dir" ]; then
  source_dir="$root"
  package=lerobot_ros
  cmake_options+=(-DLEROBOT_ROS_INTERFACES_ONLY=ON)
else
  package_dir="$(cd "$package_dir" && pwd)"
  package="$(basename "$package_dir")"
  source_dir="$build_dir/source"
  rm -rf "$source_dir"
  cp -a "$package_dir" "$source_dir"
  chmod -R u+w "$source_dir"
  # Linter tests need ament_lint packages the wheels do not ship; the imported
  # targets of the dependencies need the same include fix as ours.
  "$python" - "$source_dir/CMakeLists.txt" "$root/cmake/ros_wheel_include_fix.cmake" <<'PY'
import pathlib, re, sys
cmakelists, fix = pathlib.Path(sys.argv[1]), sys.argv[2]
text = cmakelists.read_text()
if "rosidl_generate_interfaces(" not in text:
    sys.exit(f"error: {cmakelists} has no rosidl_generate_interfaces() call")
text = re.sub(r"^\s*ADD_LINTER_TESTS\s*$\n", "", text, flags=re.M)
# At the end: rosidl_generate_interfaces itself imports targets
# (service_msgs, action_msgs) that need it too; CMake checks them only when
# it generates, after the whole file.
text += f'\ninclude("{fix}")\nlerobot_ros_fix_wheel_include_dirs()\n'
cmakelists.write_text(text)
PY
fi

# What the staged build is made of: the sources, this script, the Python
# version and every ROS 2 wheel's version.
inputs="$(
  {
    cat "${BASH_SOURCE[0]}"
    if [ -z "$package_dir" ]; then
      cd "$root" && cat CMakeLists.txt package.xml cmake/*.cmake msg/*.msg srv/*.srv action/*.action
    else
      cd "$package_dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum
    fi
    "$python" - <<'PY'
import importlib.metadata as metadata, sys
print(sys.version)
print(sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
             if d.metadata["Name"].lower().startswith(("ros-", "catkin"))))
PY
  } | sha256sum | cut -d' ' -f1
)"
staged_inputs="$build_dir/install/.lerobot_ros_inputs"

# The venv's bin first: its cmake, python and the rosidl generator scripts.
export PATH="$venv/bin:$PATH"
export AMENT_PREFIX_PATH="$venv"
export CMAKE_PREFIX_PATH="$venv"

generate() {
  rm -f "$staged_inputs"
  # CMake caches the paths it found in the venv it configured with: another venv starts afresh.
  if [ "$(grep -s '^Python3_EXECUTABLE:' "$build_dir/cmake/CMakeCache.txt" | cut -d= -f2-)" != "$python" ]; then
    rm -rf "$build_dir/cmake" "$build_dir/install"
  fi
  cmake -S "$source_dir" -B "$build_dir/cmake" \
    "${cmake_options[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$build_dir/install" \
    -DPython3_EXECUTABLE="$python" \
    -DBUILD_TESTING=OFF \
    >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log" >&2; exit 1; }
  cmake --build "$build_dir/cmake" --parallel "$(nproc)" >"$build_dir/build.log" 2>&1 \
    || { tail -n 60 "$build_dir/build.log" >&2; exit 1; }
  cmake --install "$build_dir/cmake" >"$build_dir/install.log" 2>&1 \
    || { cat "$build_dir/install.log" >&2; exit 1; }
  echo "$inputs" > "$staged_inputs"
}

if [ -f "$staged_inputs" ] && [ "$(cat "$staged_inputs")" = "$inputs" ]; then
  echo "$package interfaces: reusing the build in $build_dir (same sources, Python and ROS 2 wheels)"
else
  generate
fi
if [ "${LEROBOT_ROS_STAGE_ONLY:-0}" = 1 ]; then
  echo "$package interfaces: staged in $build_dir/install"
  exit 0
fi

# Install FILE... into DIR without writing into an existing file: copy beside it, then rename over it.
# `cp` over a file writes into the inode that running nodes have mapped: the kernel then drops their
# relocated pages of the library and every node of the venv jumps to an unrelocated address (SIGSEGV),
# even when the new bytes are identical. After a rename they keep the old inode; new processes load the new.
install_atomically() {  # install_atomically DIR FILE...
  local dir=$1 file tmp
  shift
  for file in "$@"; do
    tmp="$dir/.$(basename "$file").tmp.$$"
    cp -a "$file" "$tmp" && mv -f "$tmp" "$dir/$(basename "$file")"
  done
}
install_tree_atomically() {  # install_tree_atomically SRC_DIR DEST_DIR (every file, recursively)
  local src=$1 dest=$2 rel
  (cd "$src" && find . \( -type f -o -type l \) ! -path '*/__pycache__/*') | while read -r rel; do
    mkdir -p "$dest/$(dirname "$rel")"
    install_atomically "$dest/$(dirname "$rel")" "$src/$rel"
  done
}

staged="$build_dir/install"
staged_package="$(echo "$staged"/lib/python3*/site-packages/"$package")"
[ -d "$staged_package" ] || { echo "error: no generated Python package under $staged" >&2; exit 1; }
install_atomically "$venv/lib" "$staged"/lib/*.so
mkdir -p "$venv/share" "$site_packages/$package"
cp -a "$staged/share/." "$venv/share/"
# rosidl installs the generated Python as a distribution of its own: an
# empty __init__.py and an egg-info. For lerobot_ros either would shadow the
# real package (pip's editable install or wheel), so copy only the generated
# modules, whatever order pip and this script ran in. Another package is
# only its generated code, __init__.py included.
for generated in "$staged_package"/*; do
  case "$(basename "$generated")" in
    __pycache__) ;;
    __init__.py) [ "$package" = lerobot_ros ] || install_atomically "$site_packages/$package" "$generated" ;;
    *) if [ -d "$generated" ]; then install_tree_atomically "$generated" "$site_packages/$package/$(basename "$generated")"
       else install_atomically "$site_packages/$package" "$generated"; fi ;;
  esac
done
echo "$package interfaces installed into $venv"
