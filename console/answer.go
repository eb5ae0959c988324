package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// detail is one detail of a stored error, decoded. The JSON API shows its
// type and value. The page shows the well-known types by their fields.
// An Any of a type this build does not know has no value.
type detail struct {
	Type  string          `json:"type"` // the Any's type URL
	Value json.RawMessage `json:"value"`

	// What the page shows, by type. At most one is set.
	BadRequest          *errdetails.BadRequest          `json:"-"`
	ErrorInfo           *errdetails.ErrorInfo           `json:"-"`
	RetryDelay          string                          `json:"-"` // of a RetryInfo
	PreconditionFailure *errdetails.PreconditionFailure `json:"-"`
	ResourceInfo        *errdetails.ResourceInfo        `json:"-"`
	Help                *errdetails.Help                `json:"-"`
	LocalizedMessage    *errdetails.LocalizedMessage    `json:"-"`
	// Unknown says the type is not in this build: the value is not shown.
	Unknown bool `json:"-"`
}

// decodeDetail decodes a, one detail of a stored error.
func decodeDetail(a *anypb.Any) detail {
	d := detail{Type: a.GetTypeUrl()}
	m, err := a.UnmarshalNew()
	if err != nil {
		d.Unknown = true
		return d
	}
	d.Value, _ = indentedJSON(m) // none shown when it does not marshal
	switch m := m.(type) {
	case *errdetails.BadRequest:
		d.BadRequest = m
	case *errdetails.ErrorInfo:
		d.ErrorInfo = m
	case *errdetails.RetryInfo:
		d.RetryDelay = m.GetRetryDelay().AsDuration().String()
	case *errdetails.PreconditionFailure:
		d.PreconditionFailure = m
	case *errdetails.ResourceInfo:
		d.ResourceInfo = m
	case *errdetails.Help:
		d.Help = m
	case *errdetails.LocalizedMessage:
		d.LocalizedMessage = m
	}
	return d
}

// decodeDetails decodes the details of a stored error, in order.
func decodeDetails(details []*anypb.Any) []detail {
	out := make([]detail, 0, len(details))
	for _, a := range details {
		out = append(out, decodeDetail(a))
	}
	return out
}

// indentedJSON is m as protojson, indented. protojson varies its spacing
// from build to build on purpose: json.Indent gives people and scripts
// one layout.
func indentedJSON(m proto.Message) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, b, "", "  "); err != nil {
		return nil, err
	}
	return indented.Bytes(), nil
}

// metadataEntry is one value of a stored header or trailer.
type metadataEntry struct {
	Name, Value string
}

// metadataRows are md's values, by name, for a table. A binary value
// (a name ending in -bin) is shown in base64, as gRPC sends it.
func metadataRows(md map[string][]string) []metadataEntry {
	names := make([]string, 0, len(md))
	for name := range md {
		names = append(names, name)
	}
	slices.Sort(names)
	var rows []metadataEntry
	for _, name := range names {
		for _, v := range md[name] {
			if strings.HasSuffix(name, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			rows = append(rows, metadataEntry{Name: name, Value: v})
		}
	}
	return rows
}

// attemptsText says in words what a record's attempt count means. Each
// attempt after the first took over a claim whose lease ran out.
func attemptsText(attempt uint64) string {
	switch attempt {
	case 0:
		return "No attempt is recorded."
	case 1:
		return "The handler ran once: no takeover."
	case 2:
		return "The handler ran 2 times: 1 takeover, after a lease ran out."
	}
	n := strconv.FormatUint(attempt, 10)
	return "The handler ran " + n + " times: " + strconv.FormatUint(attempt-1, 10) + " takeovers, each after a lease ran out."
}

// timeLeft says how far t is from now, for a person: "in 5m0s", "3s
// ago" or "now".
func timeLeft(t, now time.Time) string {
	switch d := t.Sub(now).Round(time.Second); {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	}
	return "now"
}
