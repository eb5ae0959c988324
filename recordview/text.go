package recordview

import (
	"fmt"
	"io"
	"strings"
	"time"
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

// when is t in UTC and how far from now.
func when(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return fmt.Sprintf("%s (in %s)", t.Format(time.RFC3339), d)
	}
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), -d)
}

// yesNo is whether a record was stored by a transactional method, for a
// person. Its consequence for a release is in the docs.
func yesNo(b bool) string {
	if b {
		return "yes (its writes commit with its result)"
	}
	return "no"
}
