#!/bin/bash
# pg-instructions.sh counts the instructions PostgreSQL executes for one
# fresh create, with and without the idempotency interceptor. Valgrind's
# callgrind counts them, so the figures repeat from run to run whatever
# else the machine does, unlike CPU times. It starts a throwaway cluster
# under callgrind, serves each build on it with one pooled connection (one
# backend does all the work), sends 300 and then 900 creates with ghz at
# c=1, and prints the difference per create, which leaves out connecting
# and the first statements' planning.
#
# Usage: daemon/bench/pg-instructions.sh, from the repository, after `make bench`
# has built bin/paymentsd, bin/paymentsd-baseline and bin/ghz. It needs
# valgrind; as root it runs PostgreSQL as the postgres user.
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in bin/paymentsd bin/paymentsd-baseline bin/ghz; do
	[ -x "$f" ] || { echo "$f is missing: run make bench first" >&2; exit 1; }
done
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
pgbin=$(dirname "$(readlink -f "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")")
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

dir=$(mktemp -d)
[ "$(id -u)" = 0 ] && chown postgres "$dir"
pgport=$(free_port)
as_pg "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust --locale=C --no-sync >/dev/null
printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\nautovacuum = off\n" "$pgport" "$dir/data" >>"$dir/data/postgresql.conf"
as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%p" "$pgbin/postgres" -D "$dir/data" >"$dir/postgres.log" 2>&1 &
pgpid=$!
cleanup() {
	as_pg "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || kill "$pgpid" 2>/dev/null
	wait "$pgpid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
until "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pgport"; do sleep 1; done

# instructions BINARY N: the instructions of the busiest backend while
# BINARY served N creates.
instructions() {
	local db="i$RANDOM" port before files best=0 n ir
	port=$(free_port)
	"$pgbin/psql" -qX -h 127.0.0.1 -p "$pgport" -U postgres -c "CREATE DATABASE $db" postgres
	before=$(ls "$dir"/callgrind.*)
	"$1" --db "postgres://postgres@127.0.0.1:$pgport/$db?sslmode=disable" --db-pool 1 \
		--listen "127.0.0.1:$port" --http-listen "" --metrics-listen "" >"$dir/paymentsd.log" 2>&1 &
	local pid=$!
	until bin/paymentsd health --addr "127.0.0.1:$port" >/dev/null 2>&1; do sleep 0.5; done
	bin/ghz --insecure --call payments.v1.PaymentIntentService/CreatePaymentIntent -c 1 -n "$2" \
		-d '{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}' \
		--metadata '{"authorization":"Bearer bench","idempotency-key":"fresh-{{.RequestNumber}}"}' "127.0.0.1:$port" >/dev/null
	kill "$pid"
	wait "$pid" || true
	sleep 3 # callgrind writes a backend's counts when it exits
	files=$(comm -13 <(echo "$before") <(ls "$dir"/callgrind.*))
	for f in $files; do
		ir=$(awk '/^summary:/ {print $2; exit}' "$f")
		[ "${ir:-0}" -gt "$best" ] && best=$ir
	done
	echo "$best"
}

for b in bin/paymentsd bin/paymentsd-baseline; do
	low=$(instructions "$b" 300)
	high=$(instructions "$b" 900)
	echo "$b: $(((high - low) / 600)) PostgreSQL instructions per create"
done
