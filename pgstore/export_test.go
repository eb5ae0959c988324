package pgstore

// SelectInFlight is the query of an InFlight page, for its plan's test.
const SelectInFlight = selectInFlight

// SelectKey is the query of FindKey, for its plan's test.
const SelectKey = selectKey

// CannotWrite is the classification of errors that makes Probe write.
var CannotWrite = cannotWrite
