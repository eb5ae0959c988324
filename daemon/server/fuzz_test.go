package server

import (
	"bytes"
	"math/big"
	"testing"
)

func FuzzParseAmount(f *testing.F) {
	for _, seed := range []string{"1", "0", "100000000", "-1", "+1", "01", "1.5", "1e9", " 1",
		"115792089237316195423570985008687907853269984665640564039457584007913129639935",
		"115792089237316195423570985008687907853269984665640564039457584007913129639936"} {
		f.Add(seed)
	}
	limit := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	f.Fuzz(func(t *testing.T, amount string) {
		// An independent statement of the rule: digits only, no leading
		// zero, value in 1 .. 2^256-1.
		want := amount != "" && amount[0] != '0'
		for _, c := range []byte(amount) {
			want = want && c >= '0' && c <= '9'
		}
		if want {
			n, _ := new(big.Int).SetString(amount, 10)
			want = n.Sign() > 0 && n.Cmp(limit) <= 0
		}
		if err := ParseAmount(amount); (err == nil) != want {
			t.Errorf("ParseAmount(%q) = %v, want ok %t", amount, err, want)
		}
	})
}

func FuzzPageToken(f *testing.F) {
	f.Add("alice", []byte("cursor"), "")
	f.Add("alice", []byte{0, 1, 2}, "AQ")
	f.Add("bob", []byte("x"), encodePageToken("alice", []byte("x")))
	f.Fuzz(func(t *testing.T, owner string, cursor []byte, token string) {
		// Whatever a client sends is decoded without panic, and to either an
		// error or a cursor.
		decodePageToken(owner, token)
		if len(cursor) == 0 {
			return
		}
		// Our own tokens decode to their cursor, for their owner only.
		tok := encodePageToken(owner, cursor)
		got, err := decodePageToken(owner, tok)
		if err != nil || !bytes.Equal(got, cursor) {
			t.Fatalf("decode(encode(%x)) = %x, %v", cursor, got, err)
		}
		if _, err := decodePageToken(owner+"x", tok); err == nil {
			t.Errorf("%q's token accepted for %q", owner, owner+"x")
		}
		// Anything appended makes another token, which is rejected.
		if token != "" {
			if got, err := decodePageToken(owner, tok+token); err == nil {
				t.Errorf("token %q with %q appended accepted as cursor %x", tok, token, got)
			}
		}
	})
}
