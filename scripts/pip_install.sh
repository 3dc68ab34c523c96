# Sourced by the set-up scripts: pip_install VENV_PYTHON ARGS... runs
# `pip install` quietly. This machine's pip configuration names local index
# folders that may not exist, and pip warns about each on every look-up: that
# noise is dropped, every other message is kept.
pip_install() {
  local python=$1
  shift
  "$python" -m pip --disable-pip-version-check -q install "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
