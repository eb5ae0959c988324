package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestReadKey_BareAndStructuredStringNameTheSameKey(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: `order-1001`, want: `order-1001`},
		{in: `"order-1001"`, want: `order-1001`},
		{in: `"say \"hi\""`, want: `say "hi"`},
		{in: `"back\\slash"`, want: `back\slash`},
		{in: `a"b`, want: `a"b`}, // bare: quotes inside are the key's own
		{in: `""`, want: ``},     // empty: ValidateKey's to refuse
		{in: `"order-1001`, wantErr: true},
		{in: `"order-1001";p=1`, wantErr: true},
		{in: `"a\b"`, wantErr: true},
		{in: `"a\`, wantErr: true},
		{in: `"`, wantErr: true},
		{in: `a,b`, wantErr: true},      // two keys joined by a proxy, or one with a comma: either way ambiguous
		{in: `a, b`, wantErr: true},     // two bare lines merged
		{in: `"a", "b"`, wantErr: true}, // a list of two strings
		{in: `"a, b"`, wantErr: true},   // the refused "a and the key b" merged
	} {
		got, err := readKey(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("readKey(%s) = %q, %v; want %q, error %t", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestDecodeKeys_RefusesWhatMetadataCannotCarry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vals    []string
		want    []string
		wantErr string
	}{
		{name: "none"},
		{name: "bare", vals: []string{"k1"}, want: []string{"k1"}},
		{name: "two, both decoded", vals: []string{`"k1"`, "k2"}, want: []string{"k1", "k2"}},
		{name: "tab", vals: []string{"order\t1"}, wantErr: "0x09"},
		{name: "UTF-8", vals: []string{"café"}, wantErr: "printable ASCII"},
		{name: "empty string", vals: []string{`""`}, wantErr: "empty"},
		{name: "too long", vals: []string{strings.Repeat("k", 256)}, wantErr: "longer than 255"},
		{name: "unterminated", vals: []string{`"k`}, wantErr: "closing double quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.vals {
				h.Add(keyHeader, v)
			}
			err := decodeKeys(h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := h.Values(keyHeader); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("keys %q, want %q", got, tc.want)
			}
		})
	}
}
