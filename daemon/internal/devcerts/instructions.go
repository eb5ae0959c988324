package devcerts

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Instructions says how to serve and call paymentsd with the set Dev wrote
// into dir. Its paths are quoted for a shell. So the commands paste as they
// are, whatever dir is.
func Instructions(dir string) string {
	f := func(name string) string { return shellQuote(filepath.Join(dir, name)) }
	return fmt.Sprintf(`
These certificates are for development only: never use them in production.

Serve with TLS, client certificates required:

  paymentsd --tls-cert %s --tls-key %s --tls-client-ca %s

Call it as client-a:

  grpcurl -cacert %[3]s -cert %[4]s -key %[5]s \
    localhost:50051 grpc.health.v1.Health/Check
  grpcurl -cacert %[3]s -cert %[4]s -key %[5]s \
    -H 'authorization: Bearer merchant-demo' -d '{"page_size":10}' \
    localhost:50051 payments.v1.PaymentIntentService/ListPaymentIntents
  curl --cacert %[3]s --cert %[4]s --key %[5]s \
    -H 'Authorization: Bearer merchant-demo' https://localhost:8080/v1/payment_intents
`, f("server.pem"), f("server-key.pem"), f("ca.pem"), f("client-a.pem"), f("client-a-key.pem"))
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
