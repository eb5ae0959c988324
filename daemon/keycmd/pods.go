package keycmd

import (
	"context"
	"flag"
	"fmt"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/placement"
)

// onPods is where a principal's data lives when the servers run with
// --pods: the pods file and the placement directory, as they are given.
type onPods struct {
	path, etcd, prefix string
}

// define defines the pods flags on fs.
func (p *onPods) define(fs *flag.FlagSet) {
	fs.StringVar(&p.path, "pods", "", "with servers on several pods: their pods file, in place of --db; the principal's pod is read from --placement-etcd")
	fs.StringVar(&p.etcd, "placement-etcd", "", "with --pods: the placement directory's etcd client URLs, comma-separated, as given to the servers")
	fs.StringVar(&p.prefix, "placement-prefix", config.Default().PlacementPrefix, "with --pods: the directory's etcd key prefix, as given to the servers")
}

// check refuses --pods without its directory.
func (p *onPods) check() error {
	if p.path != "" && p.etcd == "" {
		return fmt.Errorf("--pods needs --placement-etcd, as the servers have it")
	}
	return nil
}

// dbOf returns the database that holds principal's data: db without
// --pods, else the URL of the principal's pod, or "" when it is placed
// on none, and so has nothing stored.
func (p *onPods) dbOf(ctx context.Context, db, principal string) (string, error) {
	if p.path == "" {
		return db, nil
	}
	pods, err := config.ReadPods(p.path)
	if err != nil {
		return "", err
	}
	c := config.Config{PlacementEtcd: p.etcd}
	var names []string
	for _, pod := range pods {
		names = append(names, pod.Name)
	}
	dir, err := placement.Open(ctx, placement.Config{Endpoints: c.Etcd(), Prefix: p.prefix, Pods: names})
	if err != nil {
		return "", err
	}
	defer dir.Close()
	pl, ok, err := dir.Resolve(ctx, principal)
	if err != nil || !ok {
		return "", err
	}
	for _, pod := range pods {
		if pod.Name == pl.Pod {
			return pod.URL, nil
		}
	}
	return "", fmt.Errorf("%s is placed on pod %q, which %s does not name", principal, pl.Pod, p.path)
}
