package httpapi

import "testing"

// The method label is the value promhttp gave before the face counted its
// requests itself: each known name in upper or lower case, lower-cased;
// anything else "unknown", so that a client cannot make new series.
func TestMetricMethod_AsPromhttpLabelledIt(t *testing.T) {
	for m, want := range map[string]string{
		"GET": "get", "get": "get", "POST": "post", "DELETE": "delete", "NOTIFY": "notify", "patch": "patch",
		"Get": "unknown", "PROPFIND": "unknown", "": "unknown", "G\xffT": "unknown",
	} {
		if got := metricMethod(m); got != want {
			t.Errorf("metricMethod(%q) = %q, want %q", m, got, want)
		}
	}
	if got := metricCode(0); got != "200" {
		t.Errorf("metricCode(0) = %q, want 200", got)
	}
}
