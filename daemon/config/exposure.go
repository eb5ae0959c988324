package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// Open reports whether the server accepts any bearer token as a principal
// of its own: dev mode. It does without --api-keys, unless principals come
// from client certificates alone.
func (c *Config) Open() bool {
	source, _ := auth.ParseSource(c.PrincipalFrom)
	return c.APIKeysPath == "" && source != auth.FromCert
}

// listener is one listen flag and its address.
type listener struct{ flag, addr string }

func (c *Config) listeners() []listener {
	all := []listener{{"--listen", c.Listen}, {"--http-listen", c.HTTPListen},
		{"--metrics-listen", c.MetricsListen}, {"--admin-listen", c.AdminListen}}
	var set []listener
	for _, l := range all {
		if l.addr != "" {
			set = append(set, l)
		}
	}
	return set
}

// Exposed lists the listen addresses that are not loopback ones, as
// "--flag addr".
func (c *Config) Exposed() []string {
	var exposed []string
	for _, l := range c.listeners() {
		if !IsLoopback(l.addr) {
			exposed = append(exposed, l.flag+" "+l.addr)
		}
	}
	return exposed
}

// IsLoopback reports whether addr (host:port) binds loopback interfaces
// only: localhost or a loopback IP. An empty host binds every interface;
// any other name may resolve to any address, so it is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses to serve anyone on a network unless asked by name.
// It refuses dev mode off loopback without --dev. It refuses the console's
// operators' tokens in plaintext off loopback.
func (c *Config) checkExposure() error {
	switch {
	case c.Dev && !c.Open():
		return fmt.Errorf("--dev accepts any bearer token: it has no use with --api-keys or --principal-from cert, which require credentials")
	case c.AdminListen != "" && !IsLoopback(c.AdminListen) && c.TLSCert == "":
		return fmt.Errorf("--admin-listen %s is not a loopback address: the console needs --tls-cert and --tls-key there, as operators' tokens would cross the network in plaintext", c.AdminListen)
	}
	if exposed := c.Exposed(); c.Open() && !c.Dev && len(exposed) > 0 {
		return fmt.Errorf("%s: not a loopback address, and no credential is required, so any bearer token would be served; "+
			"require credentials with --api-keys (or --tls-client-ca with --principal-from cert), "+
			"or pass --dev to serve dev mode on a network anyway", strings.Join(exposed, ", "))
	}
	return nil
}
