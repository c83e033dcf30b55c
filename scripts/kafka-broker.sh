#!/usr/bin/env bash
# A Kafka-protocol broker on loopback for the tests: nisshi, a re-implementation
# of the protocol that installs from crates.io, storing its log in SQLite.
#
#   kafka-broker.sh install     build it once into the tools cache; prints its path
#   kafka-broker.sh start DIR   run it with its storage, log and pid in DIR;
#                               prints 127.0.0.1:PORT once it answers Kafka requests
#   kafka-broker.sh stop DIR    stop the broker started in DIR
set -euo pipefail

version=0.8.1
# Only the SQLite storage the tests use, unoptimized: the broker carries a few
# test messages, and a fresh machine compiles it beside weir in a third of
# the CPU time of the release build with every storage (docs/operations.md,
# "What a cold build costs").
features=libsql
root=${WEIR_TOOLS:-$HOME/.cache/weir-tools}/nisshi-$version-$features-debug
bin=$root/bin/nisshi
ready_timeout=60

usage() {
  echo "usage: $0 install | start DIR | stop DIR" >&2
  exit 2
}

install() {
  if [[ ! -x $bin ]]; then
    # A source build of a few hundred crates: slow once, then cached under $root.
    echo "installing nisshi $version into $root" >&2
    # In cargo's own scratch directory, not weir's CARGO_TARGET_DIR, whose
    # lock would make the two builds take turns instead of sharing the cores.
    env -u CARGO_TARGET_DIR cargo install nisshi --version "$version" --locked \
      --ignore-rust-version --no-default-features --features "$features" --debug \
      --root "$root"
  fi
  echo "$bin"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Asks the broker for its metadata over the Kafka protocol: ApiVersions to learn
# which Metadata version it speaks, then Metadata, which reads its storage.
# Exits 0 only when the broker advertises the expected address.
metadata_answers() {
  python3 - "$1" <<'EOF'
import socket, struct, sys

port = int(sys.argv[1])

def call(sock, api_key, version, body, correlation_id):
    client_id = b"weir-tests"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    response = read_exactly(sock, size)
    if struct.unpack(">i", response[:4])[0] != correlation_id:
        sys.exit("response to another request")
    return response[4:]

def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            sys.exit("connection closed")
        data += chunk
    return data

def metadata_version(api_versions):
    error, count = struct.unpack(">hi", api_versions[:6])
    if error:
        sys.exit(f"ApiVersions error {error}")
    for i in range(count):
        key, low, high = struct.unpack(">hhh", api_versions[6 + 6 * i : 12 + 6 * i])
        # Versions 1 to 8 share one layout without tagged fields.
        if key == 3 and low <= 8 and high >= 1:
            return min(high, 8)
    sys.exit("no usable Metadata version")

def advertised(version, response):
    pos = 4 if version >= 3 else 0  # throttle_time_ms
    count = struct.unpack(">i", response[pos : pos + 4])[0]
    pos += 4
    addresses = []
    for _ in range(count):
        node, host_len = struct.unpack(">ih", response[pos : pos + 6])
        pos += 6
        host = response[pos : pos + host_len].decode()
        pos += host_len
        port, rack_len = struct.unpack(">ih", response[pos : pos + 6])
        pos += 6 + max(rack_len, 0)
        addresses.append(f"{host}:{port}")
    return addresses

with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
    version = metadata_version(call(sock, 18, 0, b"", 1))
    body = struct.pack(">i", -1)  # all topics
    if version >= 4:
        body += b"\x00"  # allow_auto_topic_creation
    if version >= 8:
        body += b"\x00\x00"  # include authorized operations
    if f"127.0.0.1:{port}" not in advertised(version, call(sock, 3, version, body, 2)):
        sys.exit("broker advertises another address")
EOF
}

alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # A zombie nobody has reaped yet still has a pid but is gone.
  [[ ${stat##*) } != Z* ]]
}

start() {
  local dir port pid deadline
  mkdir -p "$1"
  dir=$(cd "$1" && pwd)
  [[ -x $bin ]] || { echo "nisshi is not installed: run $0 install" >&2; exit 1; }
  port=$(free_port)
  # The sqlite:// path is relative to the working directory, so run it in DIR.
  (cd "$dir" && exec "$bin" broker \
    --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine 'sqlite://broker.db?maintenance_interval=5s') \
    </dev/null >"$dir/broker.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pid"

  deadline=$((SECONDS + ready_timeout))
  until metadata_answers "$port" 2>/dev/null; do
    if ! alive "$pid"; then
      fail "$dir" "the broker exited before it was ready"
    fi
    if ((SECONDS >= deadline)); then
      stop "$dir"
      fail "$dir" "the broker did not answer Kafka requests within $ready_timeout s"
    fi
    sleep 0.2
  done
  echo "127.0.0.1:$port"
}

fail() {
  echo "kafka-broker: $2; the end of $1/broker.log:" >&2
  tail -n 20 "$1/broker.log" >&2 || true
  exit 1
}

stop() {
  local dir=$1 pid
  [[ -f $dir/pid ]] || return 0
  pid=$(<"$dir/pid")
  # The pid file may outlive the broker; never signal a process that reused its pid.
  if alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == nisshi ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in {1..50}; do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$dir/pid"
}

case ${1:-} in
  install) install ;;
  start) [[ $# -eq 2 ]] || usage; start "$2" ;;
  stop) [[ $# -eq 2 ]] || usage; stop "$2" ;;
  *) usage ;;
esac
