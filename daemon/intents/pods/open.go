package pods

import (
	"context"
	"errors"
	"fmt"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/placement"
)

// Open opens every pod with open, then the placement directory of dc
// (its Pods are the pods' names), and returns their router. A pod or a
// directory that does not open fails it, as a --db that does not open
// fails the server; what opened is closed.
func Open(ctx context.Context, list []config.Pod, dc placement.Config, open func(context.Context, config.Pod) (intents.Backend, error)) (*Router, error) {
	var pods []Pod
	closeAll := func(err error) error {
		for _, p := range pods {
			err = errors.Join(err, p.Backend.Close())
		}
		return err
	}
	dc.Pods = nil
	for _, c := range list {
		b, err := open(ctx, c)
		if err != nil {
			return nil, closeAll(fmt.Errorf("pod %s: %w", c.Name, err))
		}
		pods = append(pods, Pod{Name: c.Name, Backend: b})
		dc.Pods = append(dc.Pods, c.Name)
	}
	dir, err := placement.Open(ctx, dc)
	if err != nil {
		return nil, closeAll(err)
	}
	return New(pods, dir, dc.Logger), nil
}
