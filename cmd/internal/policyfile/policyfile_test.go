package policyfile

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The golden file is what Marshal writes; Parse reads it back into the
// same policy, and Marshal writes the same bytes again.
func TestRoundTrip(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.GetSliceSize() != 8<<20 || p.GetMaxObjectSize() != 10<<30 || p.GetMode() != pb.CacheMode_CACHE_MODE_SHARDED ||
		p.GetDefaultTtl().AsDuration() != time.Hour || p.GetStatusTtls()[1].GetStatusFrom() != 404 || p.Compress == nil || p.GetCompress() ||
		p.GetExcludedStatuses()[1].GetTo() != 399 || p.GetBypass()[0].GetPathPatterns()[0] != "/api/*" {
		t.Fatalf("parsed %v", p)
	}
	p.Revision = 42
	out, err := Marshal(ps, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "full.yaml", out)
	again, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	p.Revision = 0
	if !proto.Equal(again[0], p) {
		t.Fatalf("read back differs:\n%v\n%v", again[0], p)
	}
	js, err := Marshal(ps, "json")
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(fromJSON[0], p) {
		t.Fatalf("read back from JSON differs:\n%s", js)
	}
}

func TestShorthandsAndProtoForms(t *testing.T) {
	ps, err := Parse([]byte(`{"name": "a", "mode": "CACHE_MODE_LOCAL", "defaultTtl": 90, "sliceSize": "512mib",
		"status_ttls": [{"status_from": 200, "status_to": 204, "ttl": "1h"}], "max_object_size": "10gb"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.CachePolicy{Name: "a", Mode: pb.CacheMode_CACHE_MODE_LOCAL, DefaultTtl: durationpb.New(90 * time.Second), SliceSize: 512 << 20,
		StatusTtls: []*pb.StatusTTL{{StatusFrom: 200, StatusTo: 204, Ttl: durationpb.New(time.Hour)}}, MaxObjectSize: 10e9}
	if !proto.Equal(ps[0], want) {
		t.Fatalf("parsed %v, want %v", ps[0], want)
	}
}

// A refused file names the line, the field and what is allowed.
func TestErrorMessages(t *testing.T) {
	for _, name := range []string{"typo-enum", "unknown-field", "bad-size"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(data)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want ErrInvalid", err)
			}
			golden(t, name+".error", []byte(err.Error()+"\n"))
		})
	}
}

func TestLineOfARefusedField(t *testing.T) {
	data := []byte("- name: a\n  path_prefix: /a/\n- name: b\n  hosts:\n    - ok.example.com\n    - Bad_Host\n  bypass:\n    - methods: [get]\n  pathPrefix: nope\n")
	for _, tc := range []struct {
		policy, field string
		want          int
	}{
		{"b", "hosts[1]", 6},
		{"b", "bypass[0].methods", 8},
		{"b", "path_prefix", 9},
		{"b", "slice_size", 3}, // not in the file: the policy's line
		{"a", "path_prefix", 2},
		{"c", "name", 0},
	} {
		if got := Line(data, tc.policy, tc.field); got != tc.want {
			t.Errorf("Line(%s, %s) = %d, want %d", tc.policy, tc.field, got, tc.want)
		}
	}
}

// A mirror of several registries reads as it is written, and compiles as
// the nodes run it: caps, TTLs and credentials optional.
func TestMirrorPolicy(t *testing.T) {
	data, err := os.ReadFile("testdata/mirror.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := policy.Compile(ps[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Registries) != 2 || c.DefaultRegistry != c.Registry("docker.io") || c.Registry("ghcr.io").URL.String() != "https://ghcr.io" ||
		c.Registry("docker.io").CredentialsFile != "/etc/shardcache/dockerhub.json" || c.TagTTL != policy.DefaultTagTTL {
		t.Fatalf("compiled %+v", c)
	}
	capped, err := Parse([]byte("name: m\npath_prefix: /v2/\ntag_ttl: 30s\nregistries:\n  - host: quay.io\n    url: https://quay.io\n    max_connections: 8\n    bandwidth: 100MiB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := capped[0].GetRegistries()[0]; r.GetBandwidth() != 100<<20 || r.GetMaxConnections() != 8 || capped[0].GetTagTtl().AsDuration() != 30*time.Second {
		t.Fatalf("parsed %v", capped[0])
	}
	_, err = Parse([]byte("name: m\nregistries:\n  - host: quay.io\n    url: https://quay.io\n    bandwith: 1MiB\n"))
	if err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "did you mean bandwidth") {
		t.Fatalf("a misspelt registry field: %v", err)
	}
}
