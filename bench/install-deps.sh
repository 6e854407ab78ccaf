#!/usr/bin/env bash
# Installs the systems bench/ compares shardcache with, from Debian's
# packages, when they are missing. Needs root (or sudo).
set -euo pipefail
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v varnishd >/dev/null 2>&1 || [ -x /usr/sbin/varnishd ] || missing+=(varnish)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing ${missing[*]} from Debian's packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Debian starts the packaged services where it can; bench starts its own.
for s in nginx varnish; do $sudo service "$s" stop >/dev/null 2>&1 || true; done
