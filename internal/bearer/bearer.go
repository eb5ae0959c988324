// Package bearer reads the bearer token of an authorization header.
// It is the one reading of a credential in paymentsd. The gRPC face, the
// HTTP face and the command line all call it. So the same bytes are the
// same token, or the same refusal, whichever way they arrive.
//
// The rule:
//
//   - There must be exactly one authorization value.
//
//   - Spaces and tabs at either end are dropped. HTTP/1.1 drops them
//     before any handler sees the value, and gRPC keeps them.
//
//   - Any other control character (0x00 to 0x1F, 0x7F) is refused, and so
//     is a byte above 0x7E. The refusal names the byte and where it is.
//
//   - The scheme is Bearer in any case, then one or more spaces, then the
//     token. The token is one or more of the visible ASCII characters 0x21
//     to 0x7E.
package bearer

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Parse returns the token of the authorization values of one request.
// If they are wrong, it returns an UNAUTHENTICATED status error saying why.
func Parse(values []string) (string, error) {
	if len(values) != 1 {
		return "", refuse("send exactly one authorization header, got %d", len(values))
	}
	v := trim(values[0])
	if err := checkBytes("authorization header", v); err != nil {
		return "", err
	}
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", refuse("authorization header must be Bearer <token>")
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", refuse("authorization header must be Bearer <token>: the token is empty")
	}
	if strings.Contains(token, " ") {
		return "", refuse("the bearer token has a space in it; a token is one word")
	}
	return token, nil
}

// ParseToken reads a token given alone, as the command line takes it.
// It applies the rule of Parse, without the scheme.
func ParseToken(s string) (string, error) {
	token := trim(s)
	if err := checkBytes("token", token); err != nil {
		return "", err
	}
	switch {
	case token == "":
		return "", refuse("the token is empty")
	case strings.Contains(token, " "):
		return "", refuse("the bearer token has a space in it; a token is one word")
	}
	return token, nil
}

// trim drops the spaces and tabs at both ends of v.
func trim(v string) string { return strings.Trim(v, " \t") }

// checkBytes refuses a control character or a byte outside ASCII in v.
func checkBytes(what, v string) error {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c < 0x20 || c == 0x7f:
			return refuse("%s has a control character (0x%02x) at byte %d", what, c, i)
		case c > 0x7f:
			return refuse("%s has a byte outside ASCII (0x%02x) at byte %d; tokens are ASCII", what, c, i)
		}
	}
	return nil
}

func refuse(format string, args ...any) error {
	return status.Error(codes.Unauthenticated, fmt.Sprintf(format, args...))
}

// ReadToken reads the token a command is given on its standard input, r.
// The token is the first line, without the line break that echo or a
// terminal adds. It is read by ParseToken's rule. So the same bytes name
// the same principal there as in a call.
func ReadToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read the token: %w", err)
	}
	token, err := ParseToken(strings.TrimRight(line, "\r\n"))
	if err != nil {
		return "", fmt.Errorf("the token on standard input: %s", status.Convert(err).Message())
	}
	return token, nil
}

// ParseFile reads a token kept in a file, as Prometheus's credentials_file
// holds it. The token is the whole file, one line, with a final line break
// allowed. A file of more lines is refused rather than read in part.
// So the token checked is the one the scraper sends.
func ParseFile(data []byte) (string, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return "", fmt.Errorf("the token file has more than one line (a line break at byte %d); it holds the token alone", i)
	}
	token, err := ParseToken(s)
	if err != nil {
		return "", fmt.Errorf("the token file: %s", status.Convert(err).Message())
	}
	return token, nil
}
