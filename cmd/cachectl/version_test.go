package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/sdk/admin"
)

func TestVersionOutput(t *testing.T) {
	v := &versions{
		Client:       build{Version: "v0.4.0", GoVersion: "go1.26.0"},
		ControlPlane: &build{Version: "0d9c1a2e5b7f", GoVersion: "go1.26.0", Replica: "cp-2"},
	}
	goldenFormats(t, "version", v, versionTable)
	t.Run("unreachable", func(t *testing.T) {
		goldenFormats(t, "version-unreachable", &versions{Client: v.Client}, versionTable)
	})
}

// With the control plane down, version still prints cachectl's own and
// fails naming the control plane.
func TestVersionUnreachable(t *testing.T) {
	out, _, err := runCachectl(t, "version")
	if !errors.Is(err, admin.ErrUnavailable) || !strings.HasPrefix(err.Error(), "control plane version: ") {
		t.Fatalf("err = %v, want the control plane unavailable", err)
	}
	c := clientBuild()
	if !strings.Contains(out, "client  ") || !strings.Contains(out, c.GoVersion) || !strings.Contains(out, "control plane  unreachable") {
		t.Fatalf("output:\n%s", out)
	}
}
