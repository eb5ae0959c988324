package etcdtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// freePorts picks n distinct loopback ports that are free now, below the
// kernel's ephemeral range: an outgoing connection may take a port from
// that range while a member is down. (The patroni kit's freePorts.)
func freePorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	if low <= 11000 {
		return nil, fmt.Errorf("etcdtest: the ephemeral port range starts at %d, leaving no room below it", low)
	}
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try == 50*n {
			return nil, errors.New("etcdtest: no free loopback ports below the ephemeral range")
		}
		p := 10000 + rand.IntN(low-10000)
		if slices.Contains(ports, p) {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
