package main

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
)

// etcd is the placement directory's etcd of the pods scenarios, started
// by the first of them, and what removes it.
var (
	etcd     *etcdtest.Cluster
	stopEtcd = func() {}
)

// podArgs are the flags of a server that serves db as the one pod of
// --pods, in dir: a directory of its own under the run's prefix.
func podArgs(dir, db string) []string {
	if etcd == nil {
		dir, err := os.MkdirTemp("", "paymentsd-bench-etcd")
		if err != nil {
			log.Fatal(err)
		}
		c, stop, err := etcdtest.New(dir, 1)
		if err != nil {
			log.Fatalf("etcd for the pods scenarios: %v", err)
		}
		etcd, stopEtcd = c, func() { stop(); os.RemoveAll(dir) }
	}
	file := filepath.Join(dir, "pods")
	if err := os.WriteFile(file, []byte("a "+db+"\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	return []string{"--pods", file, "--placement-etcd", strings.Join(etcd.Endpoints(), ","),
		"--placement-prefix", fmt.Sprintf("/bench-%d/", pgRuns)}
}

// etcdRequests is how many key-value requests the etcd has served:
// reads, writes and transactions, from its own metrics. A watch's events
// are not requests.
func etcdRequests() float64 {
	resp, err := http.Get(etcd.Endpoints()[0] + "/metrics")
	if err != nil {
		log.Fatalf("etcd metrics: %v", err)
	}
	defer resp.Body.Close()
	var n float64
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		name, value, ok := strings.Cut(lines.Text(), " ")
		switch name {
		case "etcd_mvcc_range_total", "etcd_mvcc_txn_total", "etcd_mvcc_put_total", "etcd_mvcc_delete_total":
			if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
				n += v
			}
		}
	}
	return n
}
