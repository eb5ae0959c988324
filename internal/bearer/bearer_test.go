package bearer_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/internal/bearer"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		token  string // "" for a refusal
		msg    string // the refusal's message
	}{
		{"plain", []string{"Bearer t1"}, "t1", ""},
		{"trailing space", []string{"Bearer t1 "}, "t1", ""},
		{"trailing tab", []string{"Bearer t1\t"}, "t1", ""},
		{"leading space", []string{" Bearer t1"}, "t1", ""},
		{"two spaces", []string{"Bearer  t1"}, "t1", ""},
		{"lower-case scheme", []string{"bearer t1"}, "t1", ""},
		{"upper-case scheme", []string{"BEARER t1"}, "t1", ""},
		{"token of every visible byte", []string{"Bearer !~aZ09+/=._-"}, "!~aZ09+/=._-", ""},
		{"tab between", []string{"Bearer\tt1"}, "", "authorization header has a control character (0x09) at byte 6"},
		{"tab inside the token", []string{"Bearer t\t1"}, "", "authorization header has a control character (0x09) at byte 8"},
		{"CR LF", []string{"Bearer t1\r\n t2"}, "", "authorization header has a control character (0x0d) at byte 9"},
		{"NUL", []string{"Bearer t\x001"}, "", "authorization header has a control character (0x00) at byte 8"},
		{"DEL", []string{"Bearer t\x7f1"}, "", "authorization header has a control character (0x7f) at byte 8"},
		{"non-ASCII", []string{"Bearer t\x801"}, "", "authorization header has a byte outside ASCII (0x80) at byte 8; tokens are ASCII"},
		{"space inside the token", []string{"Bearer t1 t2"}, "", "the bearer token has a space in it; a token is one word"},
		{"no header", nil, "", "send exactly one authorization header, got 0"},
		{"two headers", []string{"Bearer t1", "Bearer t1"}, "", "send exactly one authorization header, got 2"},
		{"empty", []string{""}, "", "authorization header must be Bearer <token>"},
		{"scheme alone", []string{"Bearer"}, "", "authorization header must be Bearer <token>"},
		{"scheme and spaces", []string{"Bearer   "}, "", "authorization header must be Bearer <token>"},
		{"other scheme", []string{"Basic dDE6"}, "", "authorization header must be Bearer <token>"},
		{"scheme glued", []string{"Bearert1"}, "", "authorization header must be Bearer <token>"},
	} {
		token, err := bearer.Parse(tc.values)
		if tc.token != "" {
			if err != nil || token != tc.token {
				t.Errorf("%s: Parse(%q) = %q, %v; want %q", tc.name, tc.values, token, err, tc.token)
			}
			continue
		}
		if st := status.Convert(err); err == nil || st.Code() != codes.Unauthenticated || st.Message() != tc.msg {
			t.Errorf("%s: Parse(%q) = %q, %v; want UNAUTHENTICATED %q", tc.name, tc.values, token, err, tc.msg)
		}
	}
}

func TestParseToken_SameRuleAsParse(t *testing.T) {
	for _, s := range []string{"t1", "t1 ", "t1\t", "t 1", "t\x001", "", "  ", "t\xff"} {
		want, wantErr := bearer.Parse([]string{"Bearer " + s})
		got, err := bearer.ParseToken(s)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("ParseToken(%q) = %q, %v; Parse of Bearer and it = %q, %v", s, got, err, want, wantErr)
		}
	}
}

// errReader fails every read.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadToken_FirstLine_ParseTokensRule(t *testing.T) {
	for _, tc := range []struct {
		name, in, token, err string
	}{
		{"line break", "tok\n", "tok", ""},
		{"CRLF", "tok\r\n", "tok", ""},
		{"no line break", "tok", "tok", ""},
		{"first line only", "tok\nmore\n", "tok", ""},
		{"spaces trimmed", " tok \n", "tok", ""},
		{"empty", "", "", "the token on standard input: the token is empty"},
		{"a space", "a b\n", "", "the token on standard input: the bearer token has a space in it; a token is one word"},
		{"control", "a\x01\n", "", "the token on standard input: token has a control character (0x01) at byte 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, err := bearer.ReadToken(strings.NewReader(tc.in))
			if token != tc.token || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Errorf("ReadToken(%q) = %q, %v; want %q, %q", tc.in, token, err, tc.token, tc.err)
			}
		})
	}
	if _, err := bearer.ReadToken(errReader{}); err == nil || err.Error() != "read the token: disk on fire" {
		t.Errorf("a failed read: %v", err)
	}
}
