#!/usr/bin/env bash
# Installs what the end-to-end tests need beyond Go, from Debian's packages:
# etcd-server (the external etcd the control plane is tested against),
# prometheus with promtool (the observability test scrapes the nodes with a
# real Prometheus), docker-registry with skopeo and containerd (a real
# registry and real image clients for the registry and mirror tests), and tmux (a terminal for the cachectl
# top test). Needs root (or sudo) when something is missing.
set -euo pipefail
missing=()
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || missing+=(etcd-server)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
{ command -v containerd && command -v ctr; } >/dev/null 2>&1 || missing+=(containerd)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing ${missing[*]} from Debian's packages (for the e2e tests)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The packages may start their own services on the default ports; the tests start theirs.
$sudo service etcd stop >/dev/null 2>&1 || true
$sudo service prometheus stop >/dev/null 2>&1 || true
$sudo service docker-registry stop >/dev/null 2>&1 || true
$sudo service containerd stop >/dev/null 2>&1 || true
