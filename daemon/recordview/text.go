package recordview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// WriteText writes v for a person, one field a line. Times are in UTC,
// with how far they are from now.
func (v *View) WriteText(w io.Writer, now time.Time) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-19s "+format+"\n", append([]any{name + ":"}, args...)...)
	}
	line("principal", "%s", v.Principal)
	line("key", "%q", v.Key)
	line("state", "%s", v.stateText(now))
	line("attempt", "%d", v.Attempt)
	line("fingerprint", "%s", v.Fingerprint)
	line("fingerprint scheme", "%s", v.FingerprintScheme)
	if v.ClaimTime != nil {
		line("attempt began", "%s", when(*v.ClaimTime, now))
	}
	if v.LeaseExpiry != nil {
		line("lease expires", "%s", when(*v.LeaseExpiry, now))
	}
	line("record expires", "%s", when(v.Expiry, now))
	if v.Completed {
		line("transactional", "%s", yesNo(v.Transactional))
	}
	if v.Code != nil {
		line("code", "%s", *v.Code)
		if *v.Message != "" {
			line("message", "%s", *v.Message)
		}
		if len(v.Details) > 0 {
			line("details", "%s", strings.Join(v.Details, ", "))
		}
		v.writeDetails(w, line)
	}
	if v.ResponseType != nil {
		line("response", "%s", *v.ResponseType)
	}
	if v.IntentID != nil {
		line("intent", "%s", *v.IntentID)
	}
	if v.Owner != "" {
		line("claimed by", "%s", v.Owner)
	}
}

// writeDetails writes each detail of v's error under its type, a field a
// line, as the console's tables show them.
func (v *View) writeDetails(w io.Writer, line func(name, format string, args ...any)) {
	for _, d := range v.decoded {
		fmt.Fprintf(w, "  %s\n", printable(typeName(d.Type)))
		for _, f := range d.fields() {
			line("    "+f[0], "%s", printable(f[1]))
		}
	}
}

// printable is s for one line of a terminal: as it is, or quoted when it
// holds a control character or bytes that are not UTF-8. A stored error
// may quote the request.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// stateText is v's state for a person. It adds what the state means for
// the key's next call, when that is not plain.
func (v *View) stateText(now time.Time) string {
	state := strings.ReplaceAll(v.State, "_", " ")
	switch {
	case v.State == StateExpired && v.Completed:
		state += " (completed; the key now runs fresh)"
	case v.State == StateExpired:
		state += " (never completed; the key now runs fresh)"
	case v.State == StateInFlight && v.LeaseExpiry != nil && !v.LeaseExpiry.After(now):
		state += " (its lease ran out: the next retry takes it over)"
	}
	return state
}

// when is t in UTC and how far from now, to the second. Less than a
// second reads "under a second": rounded, a time just past would read
// "in 0s". A time equal to now is past, as a lease ending now has run out.
func when(t, now time.Time) string {
	d, far := t.Sub(now), "under a second"
	if d.Abs() >= time.Second {
		far = d.Abs().Round(time.Second).String()
	}
	if d > 0 {
		return fmt.Sprintf("%s (in %s)", t.Format(time.RFC3339), far)
	}
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), far)
}

// yesNo is whether a record was stored by a transactional method, for a
// person. Its consequence for a release is in the docs.
func yesNo(b bool) string {
	if b {
		return "yes (its writes commit with its result)"
	}
	return "no"
}
