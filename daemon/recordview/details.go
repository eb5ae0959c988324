package recordview

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Detail is one detail of a stored error, decoded. The console's JSON API
// shows its type and value. The console's page and paymentsd record show
// the well-known types by their fields, from this one decoding. An Any of
// a type this build does not know has no value.
type Detail struct {
	Type  string          `json:"type"` // the Any's type URL
	Value json.RawMessage `json:"value"`

	// What is shown, by type. At most one is set.
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

// DecodeDetail decodes a, one detail of a stored error.
func DecodeDetail(a *anypb.Any) Detail {
	d := Detail{Type: a.GetTypeUrl()}
	m, err := a.UnmarshalNew()
	if err != nil {
		d.Unknown = true
		return d
	}
	d.Value, _ = IndentedJSON(m) // none shown when it does not marshal
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

// DecodeDetails decodes the details of a stored error, in order.
func DecodeDetails(details []*anypb.Any) []Detail {
	out := make([]Detail, 0, len(details))
	for _, a := range details {
		out = append(out, DecodeDetail(a))
	}
	return out
}

// IndentedJSON is m as protojson, indented. protojson varies its spacing
// from build to build on purpose: json.Indent gives people and scripts
// one layout.
func IndentedJSON(m proto.Message) (json.RawMessage, error) {
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

// typeName is the message name a type URL ends in, for a person.
func typeName(typeURL string) string {
	return typeURL[strings.LastIndex(typeURL, "/")+1:]
}

// fields are d's fields as name and value, for a line each: the rows of
// the console's tables for d.
func (d *Detail) fields() [][2]string {
	var f [][2]string
	add := func(name, value string) { f = append(f, [2]string{name, value}) }
	switch {
	case d.BadRequest != nil:
		for _, v := range d.BadRequest.GetFieldViolations() {
			add("violation", v.GetField()+": "+v.GetDescription())
		}
	case d.ErrorInfo != nil:
		add("reason", d.ErrorInfo.GetReason())
		add("domain", d.ErrorInfo.GetDomain())
		md := d.ErrorInfo.GetMetadata()
		for _, k := range slices.Sorted(maps.Keys(md)) {
			add("metadata", k+": "+md[k])
		}
	case d.RetryDelay != "":
		add("retry after", d.RetryDelay+" (a hint, not a rule)")
	case d.PreconditionFailure != nil:
		for _, v := range d.PreconditionFailure.GetViolations() {
			add("violation", v.GetType()+" "+v.GetSubject()+": "+v.GetDescription())
		}
	case d.ResourceInfo != nil:
		r := d.ResourceInfo
		add("type", r.GetResourceType())
		add("name", r.GetResourceName())
		add("owner", r.GetOwner())
		add("description", r.GetDescription())
	case d.Help != nil:
		for _, l := range d.Help.GetLinks() {
			add("link", l.GetDescription()+" "+l.GetUrl())
		}
	case d.LocalizedMessage != nil:
		add("localized", d.LocalizedMessage.GetLocale()+": "+d.LocalizedMessage.GetMessage())
	case d.Unknown:
		add("value", "not shown: a type this build does not know")
	default:
		var compact bytes.Buffer
		json.Compact(&compact, d.Value) // none shown when it did not marshal
		add("value", compact.String())
	}
	return f
}
