#!/usr/bin/env bash
# Installs what the end-to-end tests need beyond Go: Debian's etcd-server, the
# external etcd the control plane is tested against. Needs root (or sudo).
set -euo pipefail
if command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing etcd-server from Debian's packages (for the e2e tests)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends etcd-server
# The package may start its own etcd on the default ports; the tests start theirs.
$sudo service etcd stop >/dev/null 2>&1 || true
