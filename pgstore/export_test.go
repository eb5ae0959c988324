package pgstore

import "time"

// SelectInFlight is the query of an InFlight page, for its plan's test.
const SelectInFlight = selectInFlight

// SelectKey is the query of FindKey, for its plan's test.
const SelectKey = selectKey

// CannotWrite is the classification of errors that makes Probe write.
var CannotWrite = cannotWrite

// SuspectFor is how long a server that stalled is suspect at first.
const SuspectFor = suspectFor

// Suspicion marks addr suspect at now in a standby of its own and returns
// a func that tells until when addr is suspect as seen at a time.
func Suspicion() (mark func(addr string, now time.Time), until func(addr string) time.Time) {
	s := &standby{}
	return s.markAt, func(addr string) time.Time {
		v, ok := s.suspects.Load(addr)
		if !ok {
			return time.Time{}
		}
		return v.(suspicion).until
	}
}
