#!/usr/bin/env bash
# Create or update the project's Python environment. Idempotent: a second run
# with unchanged inputs returns in well under a second.
#
# usage: scripts/setup_env.sh [--robot]
#   (default)  development/server environment in .venv: ROS 2 Kilted wheels,
#              LeRobot 0.6.1 with the server extras, test tools, the
#              interfaces, and lerobot_ros installed editable.
#   --robot    robot-side environment: ROS 2 wheels, the interfaces and a
#              regular (non-editable) `pip install .` with no server extra,
#              i.e. no torch and no LeRobot.
#   Both lay the package out for ament (share/lerobot_ros/{launch,config},
#   lib/lerobot_ros/<executables>, the venv on AMENT_PREFIX_PATH), so a `ros2`
#   command finds it. The default profile also installs ROS 2's command-line
#   and launch tools (`ros2`, launch, launch_ros) and the interface packages
#   composition_interfaces and tf2_msgs from their sources in
#   LEROBOT_ROS_ROS2_TOOLS, where no ROS 2 install provides them.
# environment:
#   LEROBOT_ROS_VENV        where to create the venv (default: <repo>/.venv)
#   LEROBOT_ROS_PYTHON      the Python 3.12 interpreter to use (default: searched)
#   LEROBOT_ROS_PRINT_INPUTS_HASH=1  print the hash of the inputs and exit
#   LEROBOT_ROS_ROS2_TOOLS  the ROS 2 tools' sources (default:
#                           <repo>/../shared/vendor/ros2_tools); when the folder
#                           is absent and no ROS 2 install is sourced, the tools
#                           are skipped and the tests that need them skip
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile=dev
case "${1:-}" in
  "") ;;
  --robot) profile=robot ;;
  -h|--help) sed -n '2,27p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) echo "error: unknown argument '$1' (expected nothing or --robot)" >&2; exit 2 ;;
esac
venv="${LEROBOT_ROS_VENV:-$root/.venv}"

# shellcheck source=find_python312.sh
. "$root/scripts/find_python312.sh"
python312="$(lerobot_ros_find_python312)"

# Where `ros2`, launch and launch_ros come from: a sourced ROS 2 install, the
# vendored sources (default profile), or nowhere.
ros2_tools="${LEROBOT_ROS_ROS2_TOOLS:-$root/../shared/vendor/ros2_tools}"
if [ "$profile" = robot ]; then
  tools=none
elif [ -n "${ROS_DISTRO:-}" ] && command -v ros2 >/dev/null 2>&1; then
  tools=ros-install
elif [ -d "$ros2_tools" ]; then
  tools=vendored
  ros2_tools="$(cd "$ros2_tools" && pwd)"
else
  tools=none
fi

# Everything that changes what this script installs. Python files of the
# package are not listed: the dev install is editable, so edits need no setup.
inputs_hash="$(
  cd "$root" && {
    echo "$profile $(lerobot_ros_python_identity "$python312")"
    cat setup.py package.xml CMakeLists.txt cmake/*.cmake msg/*.msg srv/*.srv action/*.action bin/* \
      scripts/setup_env.sh scripts/build_interfaces.sh scripts/find_python312.sh \
      scripts/install_ament_package.sh scripts/install_ros2_tools.sh scripts/pip_install.sh
    if [ "$profile" = robot ]; then
      find lerobot_ros launch config -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 cat
    else
      # launch/ and config/ are linked file by file: only a new or removed file needs a set-up.
      find launch config -type f -not -path '*/__pycache__/*' | sort
    fi
    echo "tools: $tools"
    if [ "$tools" = vendored ]; then
      (cd "$ros2_tools" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
    fi
  } | sha256sum | cut -d' ' -f1
)"
if [ "${LEROBOT_ROS_PRINT_INPUTS_HASH:-}" = 1 ]; then
  echo "$inputs_hash"  # what decides "up to date" (test/install/test_setup_script.py)
  exit 0
fi
stamp="$venv/.lerobot_ros_setup"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ] && [ -x "$venv/bin/python" ]; then
  echo "lerobot_ros: environment $venv is up to date"
  exit 0
fi

started=$SECONDS
if [ -x "$venv/bin/python" ] && [ "$(lerobot_ros_python_version "$venv/bin/python")" != "$(lerobot_ros_python_version "$python312")" ]; then
  echo "lerobot_ros: $venv was made with another Python; recreating it"
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "lerobot_ros: creating $venv with $python312"
  "$python312" -m venv "$venv"
fi
rm -f "$stamp"
. "$root/scripts/pip_install.sh"

echo "lerobot_ros: [$((SECONDS - started)) s] installing the ROS 2 wheels"
# Only the requirements of the ros-wheels and interfaces-build extras, read from
# setup.py: installing the package itself here would build it twice.
mapfile -t ros_requirements < <("$venv/bin/python" - "$root/setup.py" <<'PY'
import runpy, sys, types
captured = {}
setuptools = types.ModuleType("setuptools")
setuptools.setup = lambda **arguments: captured.update(arguments)
setuptools.find_packages = lambda *args, **kwargs: []
sys.modules["setuptools"] = setuptools
runpy.run_path(sys.argv[1], run_name="__main__")
print("\n".join(captured["extras_require"]["ros-wheels"] + captured["extras_require"]["interfaces-build"]))
PY
)
[ "${#ros_requirements[@]}" -gt 0 ] || { echo "error: no ros-wheels requirements read from setup.py" >&2; exit 1; }
pip_install "$venv/bin/python" "${ros_requirements[@]}"

# The interface builds (CMake, CPU-bound) need only those wheels, and the rest
# of the install (pip unpacking several GB, mostly disk) needs none of them:
# generate them side by side, staged in build/, and install them into the venv
# once pip is done. Each staged build is reused below when its inputs (the ROS 2
# wheels' versions included) did not change meanwhile, and redone otherwise.
staging_logs="$root/build/staging"
mkdir -p "$staging_logs"
staged_jobs=()
# A failed pip install must not leave the builds running.
trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT
stage() {  # stage NAME BUILD_DIR [PACKAGE_DIR]
  local name=$1
  shift
  LEROBOT_ROS_STAGE_ONLY=1 "$root/scripts/build_interfaces.sh" "$venv" "$@" >"$staging_logs/$name.log" 2>&1 &
  staged_jobs+=("$!:$name")
}
stage lerobot_ros "$root/build/interfaces"
if [ "$tools" = vendored ]; then
  for package in composition_interfaces tf2_msgs; do
    stage "$package" "$root/build/ros2_tools/interfaces-$package" "$ros2_tools/$package"
  done
fi

echo "lerobot_ros: [$((SECONDS - started)) s] installing dependencies ($profile profile; the first run downloads several GB for LeRobot and torch)"
if [ "$profile" = dev ]; then
  # compat mode puts the checkout on sys.path through a .pth file, so the
  # package and the generated interfaces in site-packages form one package.
  pip_install "$venv/bin/python" -e "$root[ros-wheels,interfaces-build,server,record,test,demo,bench,kubernetes]" --config-settings editable_mode=compat
else
  pip_install "$venv/bin/python" "$root[ros-wheels,interfaces-build,test]"
fi
"$venv/bin/python" -c "import lerobot_ros" || { echo "error: pip install failed (see above)" >&2; exit 1; }
for job in "${staged_jobs[@]}"; do
  wait "${job%%:*}" || { cat "$staging_logs/${job#*:}.log" >&2; echo "error: generating ${job#*:} failed" >&2; exit 1; }
done

echo "lerobot_ros: [$((SECONDS - started)) s] installing the ROS interfaces"
# One build directory for both profiles: the robot venv reuses the development venv's build.
"$root/scripts/build_interfaces.sh" "$venv" "$root/build/interfaces"

"$venv/bin/python" -c "from lerobot_ros.msg import Observation; from lerobot_ros.srv import OpenSession" \
  || { echo "error: the generated interfaces do not import" >&2; exit 1; }
if [ "$profile" = dev ]; then
  "$root/scripts/install_ament_package.sh" "$venv" link
else
  "$root/scripts/install_ament_package.sh" "$venv" copy
fi

case "$tools" in
  vendored)
    echo "lerobot_ros: [$((SECONDS - started)) s] installing the ROS 2 tools from $ros2_tools"
    "$root/scripts/install_ros2_tools.sh" "$venv" "$ros2_tools" "$root/build/ros2_tools"
    "$venv/bin/python" -c "import launch_ros.actions, ros2cli; from tf2_msgs.msg import TFMessage" \
      || { echo "error: the ROS 2 tools do not import" >&2; exit 1; }
    ;;
  ros-install) echo "lerobot_ros: ROS 2 tools: using the sourced ROS 2 $ROS_DISTRO install ($(command -v ros2))" ;;
  none)
    if [ "$profile" = dev ]; then
      echo "lerobot_ros: ROS 2 tools: skipped (no $ros2_tools and no sourced ROS 2 install; the tests that need them skip)"
    fi
    ;;
esac
echo "$inputs_hash" > "$stamp"
echo "lerobot_ros: environment ready in $((SECONDS - started)) s ($(du -sh "$venv" | cut -f1))"
