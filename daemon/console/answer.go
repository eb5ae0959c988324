package console

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/daemon/recordview"
)

// detail is one detail of a stored error, decoded as recordview decodes
// it for paymentsd record, so that both show the same fields.
type detail = recordview.Detail

// decodeDetails decodes the details of a stored error, in order.
func decodeDetails(details []*anypb.Any) []detail { return recordview.DecodeDetails(details) }

// indentedJSON is m as protojson, indented, as recordview shows a detail.
func indentedJSON(m proto.Message) (json.RawMessage, error) { return recordview.IndentedJSON(m) }

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
