package main

import (
	"bytes"
	"os"
	"testing"
)

// TestRender_IsTheCommittedDashboard: deploy/grafana/paymentsd.json is
// what this generator writes, so that a change to either without make
// generate fails here as well as in CI.
func TestRender_IsTheCommittedDashboard(t *testing.T) {
	got, err := render()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../paymentsd.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("deploy/grafana/paymentsd.json differs from what deploy/grafana/gen writes: run make generate and commit it")
	}
}

// TestRender_IsStable: two renders are the same bytes, so make generate
// run twice leaves no diff.
func TestRender_IsStable(t *testing.T) {
	a, err := render()
	if err != nil {
		t.Fatal(err)
	}
	b, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two renders differ")
	}
}
