# The ROS 2 wheels on PyPI export their `*__rosidl_generator_py` targets with
# include directories of the machine that built the wheels
# (/opt/python/cp3XX-.../include/...). CMake refuses imported targets that
# name missing directories, so interface generation fails in a venv. Drop the
# missing directories and use this interpreter's Python and NumPy headers
# instead. On a regular ROS install every directory exists and this is a no-op.
function(lerobot_ros_fix_wheel_include_dirs)
  get_property(_targets DIRECTORY PROPERTY IMPORTED_TARGETS)
  set(_python_found FALSE)
  foreach(_target IN LISTS _targets)
    if(NOT _target MATCHES "__rosidl_generator_py$")
      continue()
    endif()
    get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _dirs)
      continue()
    endif()
    set(_kept "")
    set(_dropped FALSE)
    foreach(_dir IN LISTS _dirs)
      if(_dir MATCHES "^\\$<" OR EXISTS "${_dir}")
        list(APPEND _kept "${_dir}")
      else()
        set(_dropped TRUE)
      endif()
    endforeach()
    if(NOT _dropped)
      continue()
    endif()
    if(NOT _python_found)
      find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module NumPy)
      set(_python_found TRUE)
    endif()
    # BUILD_INTERFACE only: these headers are needed to compile here, and
    # must not leak into this package's exported targets (the venv may live
    # inside the source tree, which CMake refuses in an install export).
    foreach(_dir IN LISTS Python3_INCLUDE_DIRS Python3_NumPy_INCLUDE_DIRS)
      list(APPEND _kept "$<BUILD_INTERFACE:${_dir}>")
    endforeach()
    list(REMOVE_DUPLICATES _kept)
    set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kept}")
  endforeach()
endfunction()

# rosidl_generator_py adds this interpreter's Python and NumPy include
# directories to the package's own generator target as PUBLIC. When the
# interpreter is a venv inside the source tree (<repo>/.venv), CMake refuses
# to export such paths. Keep them for the build, out of the install export.
function(lerobot_ros_keep_source_paths_out_of_exports target)
  get_target_property(_dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _dirs)
    return()
  endif()
  set(_fixed "")
  foreach(_dir IN LISTS _dirs)
    string(FIND "${_dir}" "${CMAKE_SOURCE_DIR}/" _position)
    if(_position EQUAL 0)
      list(APPEND _fixed "$<BUILD_INTERFACE:${_dir}>")
    else()
      list(APPEND _fixed "${_dir}")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_fixed}")
endfunction()
