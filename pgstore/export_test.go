package pgstore

// SelectInFlight is the query of an InFlight page, for its plan's test.
const SelectInFlight = selectInFlight
