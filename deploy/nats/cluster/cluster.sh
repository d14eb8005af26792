#!/usr/bin/env bash
# Starts, stops or shows a 3-node offload NATS cluster on this machine, from
# node1.conf, node2.conf and node3.conf (clients on 127.0.0.1:4222-4224,
# monitoring on 8222-8224, routes on 6222-6224).
#
#   deploy/nats/cluster/cluster.sh start|stop|status
#
# start needs nats-server (on PATH, or NATS_SERVER=path; `make cluster/up`
# builds the module's version into .bin/) and the passwords
# OFFLOAD_{ADMIN,AGENT,WORKER_SLEEP,WORKER_HTTP,WORKER_FILES,WORKER_SHELL,APPROVER,ANSWERER,ROUTE}_PASSWORD in the
# environment. Data, logs and pid files go under .offload-cluster/ in the
# repository's root. stop sends SIGTERM and waits for each node.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${NATS_SERVER:-nats-server}
if [[ $bin == */* ]]; then bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin"); fi
# The configurations' store directories are relative to the root.
cd "$here/../../.."
dir=.offload-cluster
nodes=(1 2 3)

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# healthy PORT: the node's /healthz answers 200, which it does once its
# JetStream is in contact with the cluster's meta leader.
healthy() {
	local status
	exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
	printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	read -r _ status _ <&3 || true
	exec 3<&-
	[[ $status == 200 ]]
}

start() {
	local missing=()
	for role in ADMIN AGENT WORKER_SLEEP WORKER_HTTP WORKER_FILES WORKER_SHELL APPROVER ANSWERER ROUTE; do
		local var=OFFLOAD_${role}_PASSWORD
		[[ -n ${!var:-} ]] || missing+=("$var")
	done
	if ((${#missing[@]})); then
		echo "cluster.sh: set ${missing[*]}" >&2
		exit 2
	fi
	# The password goes into the route URLs: keep it to URL-safe characters.
	if [[ ! $OFFLOAD_ROUTE_PASSWORD =~ ^[A-Za-z0-9._~-]+$ ]]; then
		echo "cluster.sh: OFFLOAD_ROUTE_PASSWORD may hold only A-Z a-z 0-9 . _ ~ -" >&2
		exit 2
	fi
	local routes=() pids=() n
	for n in "${nodes[@]}"; do
		routes+=("nats-route://route:${OFFLOAD_ROUTE_PASSWORD}@127.0.0.1:$((6221 + n))")
	done
	OFFLOAD_NATS_ROUTES="[$(IFS=,; echo "${routes[*]}")]"
	export OFFLOAD_NATS_ROUTES
	umask 077
	for n in "${nodes[@]}"; do
		local d=$dir/node$n
		mkdir -p "$d"
		if alive "$d/nats.pid"; then
			echo "node$n runs (pid $(cat "$d/nats.pid"))"
			continue
		fi
		: >"$d/nats.log"
		"$bin" -c "$here/node$n.conf" -l "$d/nats.log" -P "$d/nats.pid" </dev/null >"$d/stdout.log" 2>&1 &
		pids[n]=$!
	done
	for n in "${nodes[@]}"; do
		local d=$dir/node$n i
		for ((i = 0; i < 300; i++)); do
			grep -q "Server is ready" "$d/nats.log" 2>/dev/null && break
			if [[ -n ${pids[n]:-} ]] && ! kill -0 "${pids[n]}" 2>/dev/null; then break; fi
			sleep 0.1
		done
		if ! grep -q "Server is ready" "$d/nats.log" 2>/dev/null; then
			echo "cluster.sh: node$n did not start; see $d/nats.log" >&2
			tail -n 20 "$d/nats.log" >&2 || true
			exit 1
		fi
	done
	for n in "${nodes[@]}"; do
		local d=$dir/node$n i
		for ((i = 0; i < 300; i++)); do
			healthy $((8221 + n)) && break
			sleep 0.1
		done
		if ! healthy $((8221 + n)); then
			echo "cluster.sh: node$n is not healthy (JetStream) after 30 s; see $d/nats.log" >&2
			exit 1
		fi
		echo "node$n ready: nats://127.0.0.1:$((4221 + n)) (pid $(cat "$d/nats.pid"), log $d/nats.log)"
	done
	echo "NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
}

stop() {
	local n
	for n in "${nodes[@]}"; do
		local pidf=$dir/node$n/nats.pid i
		if ! alive "$pidf"; then
			rm -f "$pidf"
			continue
		fi
		kill -TERM "$(cat "$pidf")"
		for ((i = 0; i < 300; i++)); do
			alive "$pidf" || break
			sleep 0.1
		done
		if alive "$pidf"; then
			echo "cluster.sh: node$n (pid $(cat "$pidf")) still runs after 30 s" >&2
			exit 1
		fi
		rm -f "$pidf"
		echo "node$n stopped"
	done
}

status() {
	local n
	for n in "${nodes[@]}"; do
		local pidf=$dir/node$n/nats.pid
		if alive "$pidf"; then
			echo "node$n runs (pid $(cat "$pidf")): nats://127.0.0.1:$((4221 + n))"
		else
			echo "node$n stopped"
		fi
	done
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
