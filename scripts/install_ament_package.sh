#!/usr/bin/env bash
# Give a venv the files through which ament and the `ros2` command find
# lerobot_ros, laid out as a colcon install does (build_interfaces.sh has
# already installed package.xml and the ament index entry):
#   share/lerobot_ros/launch, share/lerobot_ros/config
#   lib/lerobot_ros/<executable>   (`ros2 run lerobot_ros <executable>`)
# and a .pth that puts the venv on AMENT_PREFIX_PATH, so the venv's `ros2`
# finds them without sourcing anything (the wheels' bootstrapper does the same
# for LD_LIBRARY_PATH).
#
# usage: scripts/install_ament_package.sh VENV link|copy [CHECKOUT]
#   link  every file of launch/ and config/ is a link into this checkout (the
#         editable dev install: edits need no new set-up; a new file does),
#         like colcon --symlink-install. Links to files, not to the folders:
#         `ros2 launch` walks the share folder without following links.
#   copy  copies (the regular robot install)
#   CHECKOUT  the lerobot_ros source tree (default: the one holding this script)
set -euo pipefail

usage="usage: install_ament_package.sh VENV link|copy [CHECKOUT]"
venv="$(cd "${1:?$usage}" && pwd)"
mode="${2:?$usage}"
root="$(cd "${3:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"
case "$mode" in link|copy) ;; *) echo "error: expected link or copy, got '$mode'" >&2; exit 2 ;; esac
share="$venv/share/lerobot_ros"
[ -f "$share/package.xml" ] || { echo "error: $share/package.xml is missing: run build_interfaces.sh first" >&2; exit 1; }

for folder in launch config; do
  rm -rf "${share:?}/$folder"
  if [ "$mode" = link ]; then cp -as "$root/$folder" "$share/$folder"; else cp -a "$root/$folder" "$share/$folder"; fi
done

# The executables of bin/ (which colcon installs as they are, for a ROS
# install's python3) run with this venv's interpreter.
mkdir -p "$venv/lib/lerobot_ros"
for executable in "$root"/bin/*; do
  target="$venv/lib/lerobot_ros/$(basename "$executable")"
  { echo "#!$venv/bin/python"; tail -n +2 "$executable"; } > "$target.tmp"
  chmod +x "$target.tmp"
  mv "$target.tmp" "$target"
done

site_packages="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
cat > "$site_packages/lerobot_ros_ament_prefix.pth" <<'PTH'
import os, sys; _p = os.environ.get("AMENT_PREFIX_PATH", ""); sys.prefix in _p.split(os.pathsep) or os.environ.__setitem__("AMENT_PREFIX_PATH", os.pathsep.join(filter(None, (sys.prefix, _p))))
PTH
