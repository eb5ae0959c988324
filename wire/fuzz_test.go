package wire_test

import (
	"testing"

	"github.com/paymentsd/paymentsd/wire"
)

func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"order-1001", "", " ", "~", "tab\t", "café", "\x7f", string(make([]byte, 256)), `"order-1001"`, `a"b`, " order-1001", "order 1001 "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) >= 1 && len(key) <= wire.MaxKeyLength &&
			key[0] != '"' && key[0] != ' ' && key[len(key)-1] != ' '
		for i := 0; i < len(key); i++ {
			want = want && key[i] >= 0x20 && key[i] <= 0x7e
		}
		if err := wire.ValidateKey(key); (err == nil) != want {
			t.Errorf("ValidateKey(%q) = %v, want ok %t", key, err, want)
		}
	})
}
