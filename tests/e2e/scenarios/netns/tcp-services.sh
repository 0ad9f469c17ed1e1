#!/usr/bin/env bash
# Namespace hook of 05-netns-services: on the host, inside the guest's network namespace, an
# HTTP server (python3 -m http.server) serving a random token and a line echo server, both on
# $E2E_NETNS_HOST_IP. run.sh calls it as `tcp-services.sh start` before the guest boots and
# `tcp-services.sh stop` after, in $E2E_NETNS_DIR (the logs stay there, in the run directory).
# The token and the ports reach the guest's scenarios through $E2E_NETNS_ENV.
set -euo pipefail
HTTP_PORT=8078
ECHO_PORT=7007

# listening PORT: something accepts connections on $E2E_NETNS_HOST_IP:PORT.
listening() { (exec 3<> "/dev/tcp/$E2E_NETNS_HOST_IP/$1") 2> /dev/null; }

start() {
  local token i
  mkdir -p www
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token" > www/token
  python3 -m http.server --bind "$E2E_NETNS_HOST_IP" --directory www "$HTTP_PORT" > http.log 2>&1 &
  echo $! > http.pid
  python3 -u -c '
import socketserver, sys
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            print("echo from %s: %r" % (self.client_address[0], line), flush=True)
            self.wfile.write(b"echo " + line)
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer((sys.argv[1], int(sys.argv[2])), Echo).serve_forever()
' "$E2E_NETNS_HOST_IP" "$ECHO_PORT" > echo.log 2>&1 &
  echo $! > echo.pid
  for i in $(seq 50); do
    listening "$HTTP_PORT" && listening "$ECHO_PORT" && break
    sleep 0.1
  done
  listening "$HTTP_PORT" || { echo "http.server did not listen: $(cat http.log)"; return 1; }
  listening "$ECHO_PORT" || { echo "the echo server did not listen: $(cat echo.log)"; return 1; }
  printf 'NETNS_TOKEN=%s\nNETNS_HTTP_PORT=%s\nNETNS_ECHO_PORT=%s\n' "$token" "$HTTP_PORT" "$ECHO_PORT" >> "$E2E_NETNS_ENV"
  echo "started http.server (pid $(cat http.pid)) and the echo server (pid $(cat echo.pid))"
}

stop() {
  local f
  for f in http.pid echo.pid; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2> /dev/null || true
    rm -f "$f"
  done
  echo "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
