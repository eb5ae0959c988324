//go:build benchpprof

package main

import (
	"log"
	"net/http"
	_ "net/http/pprof" // the profiles this build exists to serve
	"os"
)

// A build with -tags benchpprof serves net/http/pprof on the address in
// PAYMENTSD_PPROF. It is for profiling the real binary under load; no
// release is built with it, as the profiles answer without a credential.
func init() {
	addr := os.Getenv("PAYMENTSD_PPROF")
	if addr == "" {
		return
	}
	go func() { log.Print(http.ListenAndServe(addr, nil)) }()
}
