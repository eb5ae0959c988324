package bearer_test

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/paymentsd/paymentsd/internal/bearer"
)

// FuzzBearer_FacesAgree reads the same authorization value as the gRPC
// face receives it (the bytes as sent) and as the HTTP/1.1 face receives it
// (after net/http has read the request), and wants the same token or the
// same refusal from both. What net/http's server would refuse with a 400
// never reaches the HTTP face, and the gRPC face must refuse it too.
func FuzzBearer_FacesAgree(f *testing.F) {
	for _, seed := range []string{
		"Bearer t1",
		"Bearer t1 ",        // trailing space
		"Bearer t1\t",       // trailing tab
		"  Bearer t1",       // leading spaces
		"Bearer  t1",        // two spaces
		"bearer t1",         // lower-case scheme
		"BEARER t1",         // upper-case scheme
		"Bearer\tt1",        // tab after the scheme
		"Bearer t\t1",       // tab inside
		"Bearer t1\r\nX: y", // CR/LF
		"Bearer t\x001",     // NUL
		"Bearer t\x801",     // 0x80
		"Bearer café",       // UTF-8
		"Bearer t\x7f1",     // DEL
		"Bearer t 1",        // two words
		"",                  // empty
		"Bearer",            // no token
		"Bearer ",           // no token, trailing space
		"Basic dDE6",        // another scheme
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		grpcToken, grpcErr := bearer.Parse([]string{v})
		if grpcErr == nil {
			checkToken(t, v, grpcToken)
		}
		if strings.ContainsAny(v, "\r\n") {
			return // other header lines over HTTP/1.1, not this value
		}

		raw := "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: " + v + "\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err == nil && !serverAccepts(req.Header) {
			err = errBadRequest
		}
		if err != nil {
			// net/http answers 400: the HTTP face refuses v.
			if grpcErr == nil {
				t.Fatalf("%q: refused over HTTP/1.1 (%v), token %q over gRPC", v, err, grpcToken)
			}
			return
		}
		values := req.Header.Values("Authorization")
		httpToken, httpErr := bearer.Parse(values)
		switch {
		case (grpcErr == nil) != (httpErr == nil):
			t.Fatalf("%q: the faces disagree: gRPC %q, %v; HTTP/1.1 (values %q) %q, %v",
				v, grpcToken, grpcErr, values, httpToken, httpErr)
		case grpcErr != nil && grpcErr.Error() != httpErr.Error():
			t.Fatalf("%q: the faces refuse differently: gRPC %v; HTTP/1.1 (values %q) %v", v, grpcErr, values, httpErr)
		case grpcToken != httpToken:
			t.Fatalf("%q: the faces read different tokens: gRPC %q; HTTP/1.1 (values %q) %q", v, grpcToken, values, httpToken)
		}
	})
}

// checkToken asserts what an accepted token is: visible ASCII only, read
// the same when given alone, and read back from "Bearer " and itself.
func checkToken(t *testing.T, v, token string) {
	t.Helper()
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			t.Fatalf("%q: token %q has byte 0x%02x at %d", v, token, c, i)
		}
	}
	if got, err := bearer.ParseToken(token); err != nil || got != token {
		t.Fatalf("%q: ParseToken(%q) = %q, %v; want it back", v, token, got, err)
	}
	if got, err := bearer.Parse([]string{"Bearer " + token}); err != nil || got != token {
		t.Fatalf("%q: Parse(Bearer %q) = %q, %v; want it back", v, token, got, err)
	}
}

var errBadRequest = errors.New("400: a header net/http's server refuses")

// serverAccepts applies the check net/http's server makes of every header
// value after reading a request (it answers 400 to one that fails).
func serverAccepts(h http.Header) bool {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// FuzzParseFile wants a token file to hold the token a scraper sends: an
// accepted file's token is the one "Bearer <token>" carries, and the file
// is that token with at most its spaces, tabs and one line break around.
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{"t1", "t1\n", "t1\r\n", " t1 \n", "t1\n\n", "t1\nt2\n", "", "\n", "t 1", "t\x001", "café\n", "t1\r"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		token, err := bearer.ParseFile(data)
		if err != nil {
			return
		}
		checkToken(t, string(data), token) // and "Bearer <token>" reads it back
		rest := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
		if strings.Trim(rest, " \t") != token || strings.Count(string(data), "\n") > 1 {
			t.Fatalf("file %q gives %q: not the file's one line", data, token)
		}
	})
}
