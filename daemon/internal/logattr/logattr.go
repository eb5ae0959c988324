// Package logattr holds what both faces' log lines say of a call beyond
// its status: the idempotency key as sent, the error's reason, and the
// trailer in which the HTTP face learns the idempotency decision of the
// call it made.
package logattr

import (
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// ObservedTrailer is the trailer in which a call made by the HTTP face
// gets back the idempotency interceptor's decision for its line: the
// outcome and the attempt, "fresh 1". Only the gRPC server's calls from a
// face in the process carry it, and the face forwards no trailer to its
// callers.
const ObservedTrailer = "paymentsd-observed"

// maxKey is the longest key a line shows as it is: the longest valid one.
const maxKey = 255

// Key is an idempotency key as a log line shows it. A key is scoped to its
// caller's credential and is not a secret. One of 1 to maxKey printable
// ASCII characters, as every valid key is, is shown as it is. Any other
// value is quoted with Go's escapes, cut to maxKey bytes first, so that a
// line stays one line of bounded size whatever was sent.
func Key(sent string) string {
	plain := len(sent) > 0 && len(sent) <= maxKey
	for i := 0; plain && i < len(sent); i++ {
		plain = sent[i] >= 0x20 && sent[i] <= 0x7e
	}
	switch {
	case plain:
		return sent
	case len(sent) > maxKey:
		return strconv.QuoteToASCII(sent[:maxKey]) + "..."
	}
	return strconv.QuoteToASCII(sent)
}

// Reason is the reason of st's ErrorInfo, "" when it has none:
// IDEMPOTENCY_KEY_REUSED, say. It says why a call was refused where the
// code alone does not.
func Reason(st *status.Status) string {
	if st == nil || st.Proto() == nil || len(st.Proto().GetDetails()) == 0 {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
